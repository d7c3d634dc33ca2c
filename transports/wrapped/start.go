package wrapped

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/kennel-dev/kennel/images"
)

// MaxStartBlock is the largest start block (working directory and environment) a kernel
// accepts, in bytes.
const MaxStartBlock = 1 << 20

// startMagic opens every start block: the format's name and version.
const startMagic = "kennel-wrapped/1"

// DefaultPath is the PATH the interpreter is looked up with inside the sandbox, and the
// kernel's PATH when Spec.Env gives none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

//go:embed prelude.py
var preludeSource string

// prelude is the -c program's head that reads the start block (see prelude.py).
var prelude = images.PythonProgram(strings.ReplaceAll(preludeSource, "MAX_START_BLOCK", strconv.Itoa(MaxStartBlock)))

// loader reads the bundle from stdin, checks it and runs the stub (images/bootstrap.py).
var loader = images.BootstrapProgram()

// errBadBlock reports a start block that cannot be encoded or decoded.
var errBadBlock = errors.New("bad start block")

// encodeStart returns the start block the prelude reads: the 4-byte big-endian length,
// then the magic, dir and each env entry, each ended by a NUL byte.
func encodeStart(dir string, env []string) ([]byte, error) {
	if strings.IndexByte(dir, 0) >= 0 || dir == "" {
		return nil, fmt.Errorf("dir %q: %w", dir, errBadBlock)
	}
	n := len(startMagic) + 1 + len(dir) + 1
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
			return nil, fmt.Errorf("env entry %q is not KEY=VALUE: %w", kv, errBadBlock)
		}
		n += len(kv) + 1
	}
	if n > MaxStartBlock {
		return nil, fmt.Errorf("start block of %d bytes over %d: %w", n, MaxStartBlock, errBadBlock)
	}
	out := make([]byte, 4, 4+n)
	binary.BigEndian.PutUint32(out, uint32(n))
	out = append(out, startMagic...)
	out = append(out, 0)
	out = append(out, dir...)
	out = append(out, 0)
	for _, kv := range env {
		out = append(out, kv...)
		out = append(out, 0)
	}
	return out, nil
}

// decodeStart is the inverse of encodeStart, as the prelude reads a block (for tests and
// diagnostics). It returns the rest of b after the block.
func decodeStart(b []byte) (dir string, env []string, rest []byte, err error) {
	if len(b) < 4 {
		return "", nil, nil, fmt.Errorf("short length: %w", errBadBlock)
	}
	n := binary.BigEndian.Uint32(b)
	if n > MaxStartBlock || int(n) > len(b)-4 {
		return "", nil, nil, fmt.Errorf("length %d: %w", n, errBadBlock)
	}
	block, rest := b[4:4+n], b[4+n:]
	if len(block) == 0 || block[len(block)-1] != 0 {
		return "", nil, nil, fmt.Errorf("no final NUL: %w", errBadBlock)
	}
	fields := strings.Split(string(block[:len(block)-1]), "\x00")
	if len(fields) < 2 || fields[0] != startMagic {
		return "", nil, nil, fmt.Errorf("no magic: %w", errBadBlock)
	}
	for _, kv := range fields[2:] {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return "", nil, nil, fmt.Errorf("env entry %q: %w", kv, errBadBlock)
		}
	}
	return fields[1], fields[2:], rest, nil
}

// kernelEnv builds the kernel's whole environment: the transport's defaults (PATH, the
// stub's entries, the EOF grace), then spec's entries, then KENNEL_KERNEL_OWNER=stdin,
// which nothing overrides. A later entry of a key replaces an earlier one in place; the
// host's KENNEL_KERNEL_OWNER_PID makes no sense in a sandbox and is dropped.
func kernelEnv(defaults, spec []string) []string {
	out := make([]string, 0, len(defaults)+len(spec)+1)
	index := make(map[string]int, cap(out))
	add := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		if k == images.EnvOwnerPID {
			return
		}
		if i, ok := index[k]; ok {
			out[i] = kv
			return
		}
		index[k] = len(out)
		out = append(out, kv)
	}
	for _, kv := range defaults {
		add(kv)
	}
	for _, kv := range spec {
		add(kv)
	}
	add(images.EnvOwner + "=stdin")
	return out
}

// command is what runs after the wrapper's prefix: `env -i` with the interpreter's start
// entries (unless inheritEnv), then the interpreter running the prelude and then
// program, with arg as sys.argv[1].
func command(python, program, arg string, startEnv []string, inheritEnv bool) []string {
	var out []string
	if !inheritEnv {
		out = append(out, "env", "-i")
		out = append(out, startEnv...)
	}
	return append(out, python, "-I", "-S", "-c", prelude+"\n"+program, arg)
}

// bootProgram returns the -c program and its argument of an images argv (KernelArgv):
// [python, flags..., "-c", program, arg].
func bootProgram(argv []string) (program, arg string, err error) {
	if len(argv) < 3 || argv[len(argv)-3] != "-c" {
		return "", "", fmt.Errorf("boot argv %q has no -c program: %w", argv, errBadBlock)
	}
	return argv[len(argv)-2], argv[len(argv)-1], nil
}

// checkSandboxDir checks a working directory inside the sandbox: absolute, clean of NUL.
func checkSandboxDir(dir string) error {
	if !path.IsAbs(dir) || strings.IndexByte(dir, 0) >= 0 {
		return fmt.Errorf("dir %q is not an absolute sandbox path", dir)
	}
	return nil
}
