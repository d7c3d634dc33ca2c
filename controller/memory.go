package controller

import (
	"strconv"
	"strings"
)

// EnvKernelMemory is the environment entry that caps a kernel's resident memory, in
// bytes (the stub's sampled guard; 0 or less: no cap). The controller sets it in every
// kernel's environment from Options.KernelMemory, over any entry of Options.Env.
const EnvKernelMemory = "KENNEL_KERNEL_MEMORY_BYTES"

// DefaultKernelMemory is the memory cap of a session whose Options.KernelMemory is zero.
const DefaultKernelMemory int64 = 256 << 20

// kernelMemory is the cap a session's kernels get: set, the default, or 0 for none.
func kernelMemory(set int64) int64 {
	switch {
	case set == 0:
		return DefaultKernelMemory
	case set < 0:
		return 0
	}
	return set
}

// kernelEnv is the environment a kernel of the session starts with: Options.Env, its
// memory cap entry replaced by the session's.
func (s *Session) kernelEnv() []string {
	env := make([]string, 0, len(s.opts.Env)+1)
	for _, kv := range s.opts.Env {
		if k, _, _ := strings.Cut(kv, "="); k == EnvKernelMemory {
			continue
		}
		env = append(env, kv)
	}
	return append(env, EnvKernelMemory+"="+strconv.FormatInt(kernelMemory(s.opts.KernelMemory), 10))
}
