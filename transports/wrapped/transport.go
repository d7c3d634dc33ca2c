package wrapped

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
)

// DefaultPath is the PATH the interpreter is looked up with inside the sandbox, and the
// kernel's PATH when Spec.Env gives none.
const DefaultPath = kernelstart.DefaultPath

// Name is the wrapped transport's name, as in Info.Transport.
const Name = "wrapped"

// Options configures a Transport. The zero value of every field but ArgvPrefix is
// documented and usable.
type Options struct {
	// ArgvPrefix is the wrapper command: the kernel command is appended to it and the
	// whole runs on the host, e.g. ["docker", "exec", "-i", "box"], ["ssh", "-T", "host"],
	// ["bwrap", "--ro-bind", "/", "/", ..., "--"], ["setsid", "-w", "sh", "-c",
	// `exec "$@"`, "--"]. Its first element is looked up on the host's PATH. The wrapper
	// must carry its stdin and stdout through to the command unchanged. Empty runs the
	// command as a plain host child (still with only the kernel's environment).
	ArgvPrefix []string

	// Python is the interpreter inside the sandbox when Spec.Python is empty: a name
	// looked up on the sandbox's PATH (DefaultPath) or a sandbox path. It is never
	// resolved on the host. Empty means "python3".
	Python string

	// StubDir, when set, is a sandbox path where the stub is already unpacked (as
	// images.Bundle.Unpack lays it out, e.g. baked into the image): the kernel imports it
	// from there and no bundle is sent. Empty sends the embedded bundle over stdin before
	// the first frame, checked against its hash (images.Bundle.BootstrapArgv).
	StubDir string

	// StubHash is the bundle hash the stub at StubDir reports in its hello. Empty leaves
	// the hello's bundle empty. Unused without StubDir (the bootstrap reports the
	// embedded bundle's hash).
	StubHash string

	// InheritWrapperEnv runs the interpreter directly after the prefix instead of under
	// `env -i`, for a sandbox that has no env command. The interpreter then starts with
	// whatever environment the wrapper gives it (the host's, for a plain process wrapper):
	// the start program still replaces os.environ whole, so cells and their children see only
	// the kernel's entries, but the interpreter's own /proc/self/environ keeps the
	// wrapper's. Leave it false unless the wrapper already clears the environment.
	InheritWrapperEnv bool

	// EOFGrace is how long a cell holding the kernel may run after its stdin closed
	// before the stub exits anyway (KENNEL_KERNEL_EOF_GRACE). Zero leaves the stub's
	// default (30 s).
	EOFGrace time.Duration

	// StdinGrace is how long Kill waits for the wrapper to exit after closing the
	// kernel's stdin. Zero means transports.Grace; negative means no wait.
	StdinGrace time.Duration
	// TermGrace is how long Kill waits after SIGTERM to the wrapper's process group
	// before SIGKILL. Zero means transports.Grace; negative means no wait.
	TermGrace time.Duration
	// DrainGrace is how long the kernel's stdout and stderr may go on after the wrapper
	// has exited (something in the sandbox still holding them) before they are ended for
	// the reader. Zero means transports.Grace; negative means no wait.
	DrainGrace time.Duration

	// RunDir, when set, makes kernels detached (docs/protocol.md, "Protocol 2"): a
	// sandbox path (absolute) under which each kernel's run directory is made by its
	// start command (0700, RunDir itself 0700 when it is made). Each kernel then outlives
	// its connection and its controller, reached over kernel.sock through bridges run
	// under the wrapper (see the package doc, "Detached kernels"); the wrapper must let a
	// process outlive its first one. Empty keeps kernels on the wrapper's stdio, ending
	// with it.
	RunDir string
	// KernelGrace is how long a detached kernel lives with nothing attached (sent in
	// every attach). Zero means DefaultKernelGrace.
	KernelGrace time.Duration
}

// Transport starts kernels under a wrapper command. It is safe for concurrent use.
type Transport struct {
	opts   Options
	bundle func() (bundleCache, error)
}

// bundleCache is the embedded stub and what is sent for it, made once per Transport.
type bundleCache struct {
	bundle  *images.Bundle
	payload []byte // BootstrapPayload
}

// New returns a wrapped Transport. It starts nothing until Start.
func New(opts Options) *Transport {
	opts.ArgvPrefix = append([]string(nil), opts.ArgvPrefix...)
	return &Transport{opts: opts, bundle: sync.OnceValues(loadBundle)}
}

func loadBundle() (bundleCache, error) {
	b, err := images.Stub()
	if err != nil {
		return bundleCache{}, err
	}
	p, err := b.BootstrapPayload()
	if err != nil {
		return bundleCache{}, err
	}
	return bundleCache{bundle: b, payload: p}, nil
}

// Options returns the transport's options (a copy).
func (t *Transport) Options() Options {
	o := t.opts
	o.ArgvPrefix = append([]string(nil), o.ArgvPrefix...)
	return o
}

// Name returns "wrapped".
func (t *Transport) Name() string { return Name }

// Capabilities reports only whether kernels are detached (Options.RunDir): a wrapped
// kernel has its own environment, its own pids and its own view of the file system (the
// caller maps paths).
func (t *Transport) Capabilities() transports.Capabilities {
	return transports.Capabilities{Detached: t.opts.RunDir != ""}
}

// Start launches the wrapper with the kernel command after its prefix and returns once
// the wrapper process runs; the hello is the first frame on Stdout. ctx bounds only the
// start.
//
// The kernel command is `env -i PATH=DefaultPath <stub entries> PYTHON -I -S -c PROGRAM
// [ARG]`: the interpreter is found by name inside the sandbox, starts with an empty
// environment but for those entries (no values of Spec.Env ever appear in an argv, which
// ps shows to every user of the machine that runs it), and PROGRAM first reads the start
// block from stdin (kernelstart.Block): Spec.Dir and the kernel's whole environment,
// PATH=DefaultPath, the stub's defaults, Spec.Env, then the transport's own entries (the
// bundle hash, KENNEL_KERNEL_EOF_GRACE when EOFGrace is set, KENNEL_KERNEL_OWNER=stdin),
// a later entry winning and the transport's never given in Spec.Env (kernelstart.Env).
// Unless StubDir is set, the bundle follows the block on stdin (images.Bundle.
// BootstrapPayload), then the frames.
//
// The wrapper itself runs with the host's environment (docker and ssh need it), in its
// own process group, in the controller's working directory.
//
// Spec.Dir must be an absolute sandbox path; it is not checked on the host. A wrapper
// not found on the host is refused with transports.ErrUnavailable; a Spec or Options
// refused before anything started is a *transports.FieldError
// (errdefs.ErrInvalidArgument). A missing interpreter, stub or directory in the sandbox is
// found only by the kernel: it exits without a hello (127 from env; from the start
// program 3 for no stub at StubDir, 4 for a directory it cannot enter, 2 otherwise),
// saying why on stderr.
//
// With Options.RunDir the kernel is detached (see the package doc, "Detached kernels"):
// Start returns once the link's first handshake, over the kernel command's own stdio, is
// made, and such a failure is Start's error instead (transports.ErrUnavailable for 126
// and 127). The kernel is then a transports.Detachable with a Link, not a *Kernel.
func (t *Transport) Start(ctx context.Context, spec transports.Spec) (transports.Kernel, error) {
	if err := context.Cause(ctx); err != nil {
		return nil, fmt.Errorf("start wrapped kernel %q: %w", spec.SessionID, err)
	}
	python, err := t.check(spec)
	if err != nil {
		return nil, fmt.Errorf("start wrapped kernel %q: %w", spec.SessionID, err)
	}
	bc, err := t.bundle()
	if err != nil {
		return nil, fmt.Errorf("start wrapped kernel %q: %w", spec.SessionID, err)
	}
	if t.opts.RunDir != "" {
		k, err := t.startDetached(ctx, bc, spec, python)
		if err != nil {
			return nil, fmt.Errorf("start wrapped kernel %q: %w", spec.SessionID, err)
		}
		return k, nil
	}
	argv, preamble, err := t.plan(bc, spec, python, "")
	if err != nil {
		return nil, fmt.Errorf("start wrapped kernel %q: %w", spec.SessionID, err)
	}
	cmd, p, err := startWrapper(argv, len(preamble), spec.Stderr != nil)
	if err != nil {
		return nil, fmt.Errorf("start wrapped kernel %q: %w", spec.SessionID, err)
	}
	return newKernel(cmd, p, spec.Stderr, preamble, t.opts), nil
}

// check refuses what cannot start, before anything runs, and returns the interpreter.
func (t *Transport) check(spec transports.Spec) (python string, err error) {
	if err := transports.CheckSpec(spec); err != nil {
		return "", err
	}
	field := "Spec.Python"
	if spec.Python == "" {
		field = "Options.Python"
	}
	python = cmp.Or(spec.Python, t.opts.Python, "python3")
	if err := transports.CheckPython(field, python); err != nil {
		return "", err
	}
	for i, a := range t.opts.ArgvPrefix {
		if strings.IndexByte(a, 0) >= 0 {
			return "", &transports.FieldError{Field: fmt.Sprintf("Options.ArgvPrefix[%d]", i), Reason: "holds a NUL byte"}
		}
	}
	if t.opts.StubDir != "" {
		if err := transports.CheckPath("Options.StubDir", t.opts.StubDir); err != nil {
			return "", err
		}
	}
	if t.opts.RunDir != "" {
		if err := transports.CheckPath("Options.RunDir", t.opts.RunDir); err != nil {
			return "", err
		}
	}
	if len(t.opts.ArgvPrefix) > 0 {
		if _, err := exec.LookPath(t.opts.ArgvPrefix[0]); err != nil {
			return "", fmt.Errorf("wrapper %q: %w: %w", t.opts.ArgvPrefix[0], transports.ErrUnavailable, err)
		}
	}
	return python, nil
}

// plan returns the host argv and what is written to stdin before the first frame; for
// a detached kernel (runDir, its run directory, set) the start program is preceded by
// the bridge, and the token is the caller's to append.
func (t *Transport) plan(bc bundleCache, spec transports.Spec, python, runDir string) (argv []string, preamble []byte, err error) {
	stub := images.KernelEnv(bc.bundle)
	program, arg := images.BootstrapProgram(), []string{bc.bundle.Hash()}
	if t.opts.StubDir != "" {
		program, arg = kernelstart.BootProgram(), nil
		stub = slices.DeleteFunc(stub, func(kv string) bool { return strings.HasPrefix(kv, images.EnvBundle+"=") })
		if t.opts.StubHash != "" {
			stub = append(stub, images.EnvBundle+"="+t.opts.StubHash)
		}
	}
	startEnv := append([]string{"PATH=" + DefaultPath}, stub...)
	env := kernelstart.Env{Base: startEnv[:1], Stub: stub, EOFGrace: t.opts.EOFGrace, Detached: runDir}
	block, err := kernelstart.Block{Dir: spec.Dir, Stub: t.opts.StubDir, Run: runDir, Env: env.Build(spec.Env)}.Encode()
	if err != nil {
		return nil, nil, err
	}
	argv = slices.Clone(t.opts.ArgvPrefix)
	if !t.opts.InheritWrapperEnv {
		argv = append(append(argv, "env", "-i"), startEnv...)
	}
	start := kernelstart.Program(program)
	if runDir != "" {
		start = kernelstart.DetachedProgram(program)
	}
	argv = append(append(argv, python, "-I", "-S", "-c", start), arg...)
	preamble = block
	if t.opts.StubDir == "" {
		preamble = append(block, bc.payload...)
	}
	return argv, preamble, nil
}

// pipes are our ends of a wrapper's stdio pipes: its stdin, its stdout and its stderr
// (nil when its stderr is no pipe).
type pipes struct{ stdin, stdout, stderr *os.File }

// startWrapper starts argv in its own process group with the host's environment, its
// stdin and stdout as pipes (the stdin pipe grown to hold grow bytes) and, withStderr, its
// stderr too (else /dev/null). A wrapper that cannot be run is transports.ErrUnavailable.
func startWrapper(argv []string, grow int, withStderr bool) (_ *exec.Cmd, ours pipes, err error) {
	var theirs pipes
	defer func() {
		closeFiles(theirs) // the wrapper holds its ends now (or nobody does)
		if err != nil {
			closeFiles(ours)
		}
	}()
	if theirs.stdin, ours.stdin, err = os.Pipe(); err != nil {
		return nil, ours, err
	}
	growPipe(ours.stdin, grow)
	if ours.stdout, theirs.stdout, err = os.Pipe(); err != nil {
		return nil, ours, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout = theirs.stdin, theirs.stdout
	if withStderr {
		if ours.stderr, theirs.stderr, err = os.Pipe(); err != nil {
			return nil, ours, err
		}
		cmd.Stderr = theirs.stderr
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			err = fmt.Errorf("%w: %w", transports.ErrUnavailable, err)
		}
		return nil, ours, fmt.Errorf("run wrapper %q: %w", argv[0], err)
	}
	return cmd, ours, nil
}

// closeFiles closes p's files (a nil one's Close is a no-op error).
func closeFiles(p pipes) {
	for _, f := range []*os.File{p.stdin, p.stdout, p.stderr} {
		f.Close()
	}
}

// seeExit blocks until process pid has exited, without reaping it: until it is reaped,
// its pid and the id of the group it leads cannot be reused.
func seeExit(pid int) {
	var si unix.Siginfo
	for unix.Waitid(unix.P_PID, pid, &si, unix.WEXITED|unix.WNOWAIT, nil) == unix.EINTR {
	}
}

// maxPipeGrow is the largest stdin pipe buffer growPipe asks for (Linux's default
// /proc/sys/fs/pipe-max-size).
const maxPipeGrow = 1 << 20

// growPipe asks for a pipe buffer that holds n bytes (at most maxPipeGrow), so the
// preamble (the start block and the bundle, just over the default 64 KiB) is in the pipe
// at once and the kernel reads it without waiting for the writer to be woken between
// reads. A refusal (an older kernel, a user over its pipe quota) keeps the default.
func growPipe(w *os.File, n int) {
	if n <= 64<<10 {
		return
	}
	rc, err := w.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, min(n, maxPipeGrow))
	})
}
