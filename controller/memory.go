package controller

import (
	"cmp"
	"strconv"
	"strings"
)

// EnvKernelMemory is the environment entry that caps a kernel's resident memory, in
// bytes (the stub's sampled guard; 0 or less: no cap). The controller sets it in every
// kernel's environment from Options.KernelMemory, over any entry of Options.Env.
const EnvKernelMemory = "KENNEL_KERNEL_MEMORY_BYTES"

// DefaultKernelMemory is the memory cap of a session whose Options.KernelMemory is zero.
const DefaultKernelMemory int64 = 256 << 20

// kernelEnv is the environment a kernel of the session starts with: Options.Env, its
// memory cap entry replaced by the session's (zero: the default; negative: 0, none).
func (s *Session) kernelEnv() []string {
	env := make([]string, 0, len(s.opts.Env)+1)
	for _, kv := range s.opts.Env {
		if k, _, _ := strings.Cut(kv, "="); k == EnvKernelMemory {
			continue
		}
		env = append(env, kv)
	}
	return append(env, EnvKernelMemory+"="+strconv.FormatInt(max(cmp.Or(s.opts.KernelMemory, DefaultKernelMemory), 0), 10))
}
