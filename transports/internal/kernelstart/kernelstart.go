package kernelstart

import (
	"context"
	_ "embed"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports"
)

// DefaultPath is the PATH of a kernel in a sandbox when Spec.Env gives none, and the PATH
// the interpreter is looked up with there.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Env describes a kernel's environment as its transport makes it. Build applies the one
// precedence rule of every transport:
//
//	Base  <  the stub's defaults  <  Spec.Env  <  the transport's own entries
//
// a later layer's entry of a key replacing an earlier one in place. So a caller's entry
// wins over what the transport merely defaults (PATH, HOME, LANG, the host's variables,
// MALLOC_MMAP_THRESHOLD_), and nothing wins over the entries the transport relies on to
// keep the kernel tied to it: the reserved keys (transports.Reserved: the bundle hash, the
// owner, the EOF grace, the run marker) come from the transport alone. They are dropped
// from Base and from Stub's defaults, and a Spec.Env naming one is refused by
// transports.CheckSpec before Build runs (Build lets the transport's entry win if one
// gets through: it fails closed either way).
type Env struct {
	// Base is what the environment starts from: the host's for a local kernel (the
	// transport drops what describes the host's own kernel), a sandbox's defaults
	// elsewhere. Nil starts from nothing.
	Base []string
	// Stub is the stub's entries (images.KernelEnv): its bundle hash, a reserved key
	// that only Stub sets, and its defaults.
	Stub []string
	// OwnerPID, when positive, is the pid the kernel watches and ends with
	// (KENNEL_KERNEL_OWNER_PID). Zero makes the kernel watch its stdin alone
	// (KENNEL_KERNEL_OWNER=stdin): the rule for a kernel whose pids are not the host's.
	OwnerPID int
	// EOFGrace, when positive, is how long a cell may hold the kernel after its stdin
	// closed (KENNEL_KERNEL_EOF_GRACE, in seconds). Zero leaves the stub's default.
	EOFGrace time.Duration
	// Run, when set, is the run's marker (KENNEL_REMOTE_RUN) that a transport finds the
	// kernel's processes by when it cannot reap them by host pid.
	Run string
	// Detached, when set, is a detached kernel's run directory (KENNEL_KERNEL_RUN): the
	// kernel then watches no owner (OwnerPID is ignored) and outlives its controller.
	Detached string
}

// Build returns the kernel's whole environment for spec (a Spec.Env that passed
// transports.CheckSpec), one entry per key.
func (e Env) Build(spec []string) []string {
	fixed := slices.DeleteFunc(slices.Clone(e.Stub), func(kv string) bool { return !transports.Reserved(key(kv)) })
	if e.Detached != "" {
		fixed = append(fixed, images.EnvRun+"="+e.Detached)
	} else if e.OwnerPID > 0 {
		fixed = append(fixed, images.EnvOwnerPID+"="+strconv.Itoa(e.OwnerPID))
	} else {
		fixed = append(fixed, images.EnvOwner+"=stdin")
	}
	if e.EOFGrace > 0 {
		fixed = append(fixed, images.EnvEOFGrace+"="+strconv.FormatFloat(e.EOFGrace.Seconds(), 'f', -1, 64))
	}
	if e.Run != "" {
		fixed = append(fixed, "KENNEL_REMOTE_RUN="+e.Run)
	}
	var out []string
	for i, layer := range [][]string{e.Base, e.Stub, spec, fixed} {
		if i < 3 { // reserved keys are the transport's own
			layer = slices.DeleteFunc(slices.Clone(layer), func(kv string) bool { return transports.Reserved(key(kv)) })
		}
		out = Overlay(out, layer)
	}
	return out
}

// Overlay is base with each of over's entries (KEY=VALUE) replacing base's entry of the
// same key in place, or added after them: the environment Build's layers, and an OCI
// spec's process environment under oci.WithEnv, make.
func Overlay(base, over []string) []string {
	out := slices.Clone(base)
	index := map[string]int{}
	for i, kv := range out {
		index[key(kv)] = i
	}
	for _, kv := range over {
		if i, ok := index[key(kv)]; ok {
			out[i] = kv
			continue
		}
		index[key(kv)] = len(out)
		out = append(out, kv)
	}
	return out
}

func key(kv string) string {
	k, _, _ := strings.Cut(kv, "=")
	return k
}

// MaxBlock is the largest start block Program accepts, in bytes: the working directory,
// the environment and the rest of a Block.
const MaxBlock = 1 << 20

// magic opens every start block: the format's name and version.
const magic = "kennel-start/1"

//go:embed start.py
var startSource string

var startProgram = images.PythonProgram(strings.NewReplacer("MAX_START_BLOCK", strconv.Itoa(MaxBlock), "POOLED_READY\\n", strings.TrimSuffix(PooledReady, "\n")+"\\n").Replace(startSource))

// Program returns the -c program that reads a Block from stdin and applies it (see
// start.py), followed by next, the program that runs the stub: images' bootstrap (which
// then reads the bundle from stdin) or images' boot program over Block.Stub.
func Program(next string) string { return startProgram + "\n" + next }

// ErrBadBlock reports a Block that cannot be encoded or decoded. It matches
// errdefs.ErrInvalidArgument: what does not fit comes from a Spec.
var ErrBadBlock = fmt.Errorf("bad start block: %w", errdefs.ErrInvalidArgument)

// Block is what a kernel reads from stdin before anything else: where and with what it
// runs. Its wire form is a 4-byte big-endian length, then NUL-ended fields: the magic
// "kennel-start/1", Dir, Keep joined by ",", Run, Stub, then each Env entry.
type Block struct {
	// Dir is the working directory (absolute). Required.
	Dir string
	// Keep names the variables kept from the interpreter's own environment (a remote
	// login's PATH, HOME, ...), set first and overridden by Env. Nil keeps none.
	Keep []string
	// Run, when set, is the directory made (0700, new) to record the kernel's pid and
	// start time in, as "<pid> <start>" in its file "pid".
	Run string
	// Stub, when set, is the directory of the stub, checked to hold it and handed to the
	// next program as sys.argv[1].
	Stub string
	// Env is the kernel's environment (Env.Build), applied after Keep.
	Env []string
}

// Encode returns the block's wire form, or an ErrBadBlock error for a field the program
// could not read back: a Dir that is empty or holds NUL, a Keep name that is empty or
// holds ',', '=' or NUL, a Run or Stub with NUL, an Env entry that is not KEY=VALUE or
// holds NUL, or a block over MaxBlock.
func (b Block) Encode() ([]byte, error) {
	bad := b.Dir == "" || strings.IndexByte(b.Dir+b.Run+b.Stub, 0) >= 0
	for _, k := range b.Keep {
		bad = bad || k == "" || strings.ContainsAny(k, ",=\x00")
	}
	for _, kv := range b.Env {
		k, _, ok := strings.Cut(kv, "=")
		bad = bad || !ok || k == "" || strings.IndexByte(kv, 0) >= 0
	}
	if bad {
		return nil, fmt.Errorf("a field the start program cannot read back: %w", ErrBadBlock)
	}
	fields := append([]string{magic, b.Dir, strings.Join(b.Keep, ","), b.Run, b.Stub}, b.Env...)
	n := 0
	for _, f := range fields {
		n += len(f) + 1
	}
	if n > MaxBlock {
		return nil, fmt.Errorf("start block of %d bytes over %d: %w", n, MaxBlock, ErrBadBlock)
	}
	out := binary.BigEndian.AppendUint32(make([]byte, 0, 4+n), uint32(n))
	for _, f := range fields {
		out = append(append(out, f...), 0)
	}
	return out, nil
}

// BootProgram returns images' -c program that runs the stub unpacked in sys.argv[1]
// (images.KernelArgv's), the program after Program when Block.Stub names the stub.
func BootProgram() string {
	argv := images.KernelArgv("python3", "/")
	return argv[len(argv)-2]
}

// Undo is a start's cleanup stack: a function per thing made, each added before the thing
// is asked for (so one that a cancelled request made after all goes too).
type Undo []func(context.Context)

// Run, when *err is set, runs the stack newest first, on ctx's values with 30 s of their
// own: a start that fails half-way leaves nothing, whatever became of ctx. It is deferred.
func (u *Undo) Run(ctx context.Context, err *error) {
	if *err == nil {
		return
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for _, f := range slices.Backward(*u) {
		f(uctx)
	}
}
