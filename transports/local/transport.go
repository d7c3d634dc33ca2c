package local

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/internal/reaper"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
)

// Name is the local transport's name, as in Info.Transport.
const Name = "local"

// Options configures a Transport. The zero value of every field is documented and usable.
type Options struct {
	// CacheDir is where the stub bundle is unpacked (once per Transport). Empty means
	// images.DefaultCacheDir().
	CacheDir string
	// Python is the interpreter used when Spec.Python is empty: a name looked up on PATH
	// or a path. Empty means "python3". Each name is resolved once per Transport to the
	// real interpreter's absolute path (images.ResolvePython), so no kernel start runs a
	// shim such as pyenv's; the answer is kept on disk in PythonCacheDir, so the next
	// process's Transport need not run the interpreter either while the interpreter and
	// what chose it are unchanged (images.PythonCache).
	Python string
	// PythonCacheDir is where resolved interpreters are remembered across processes
	// (images.PythonCache.Dir). Empty means images.DefaultPythonCacheDir().
	PythonCacheDir string
	// StdinGrace is how long Kill waits for the kernel to exit after closing its stdin.
	// Zero means transports.Grace; negative means no wait.
	StdinGrace time.Duration
	// TermGrace is how long Kill waits after SIGTERM before it kills hard. The reaper
	// uses it too when the controller dies. Zero means transports.Grace; negative means no
	// wait.
	TermGrace time.Duration
	// Reaper is the executable run in reaper mode; it must call reaper.Main first in
	// main. Empty means the running binary (/proc/self/exe).
	Reaper string
	// OwnerPID is the pid the kernel watches and ends with (KENNEL_KERNEL_OWNER_PID):
	// zero or less means the controller's own.
	OwnerPID int
	// RunDir, when set, makes every kernel detached (docs/protocol.md, "Protocol 2"): it
	// runs in its own session with a run directory under RunDir holding its socket and
	// log, is reached over a link, and outlives the controller (see Detacher). Empty
	// keeps kernels tied to the controller through the reaper.
	RunDir string
	// KernelGrace is how long a detached kernel lives with nothing attached (zero:
	// DefaultKernelGrace).
	KernelGrace time.Duration
	// Bundle is the stub the kernels run. Nil means this binary's (images.Stub); a test
	// gives another build's (images.Salted) to make kernels of another bundle.
	Bundle *images.Bundle
}

// Transport starts local kernels. It is safe for concurrent use; it caches the resolved
// interpreters and the unpacked bundle.
type Transport struct {
	opts    Options
	pythons cache[string]
	bundles cache[bundleDir]
}

// bundleDir is an unpacked stub bundle.
type bundleDir struct {
	bundle *images.Bundle
	dir    string
}

// New returns a local Transport. It starts nothing and touches no file until Start.
func New(opts Options) *Transport {
	return &Transport{opts: opts}
}

// Name returns "local".
func (t *Transport) Name() string { return Name }

// Capabilities reports that local kernels see the host's environment, pids and files,
// and whether they are detached (Options.RunDir).
func (t *Transport) Capabilities() transports.Capabilities {
	return transports.Capabilities{HostEnv: true, HostPIDs: true, SameFS: true, Detached: t.opts.RunDir != ""}
}

// Start launches a kernel and returns once its process runs (not once it said hello:
// the hello is the first frame on Stdout). ctx bounds only the start.
//
// The kernel's environment is the host's (minus the host's own KENNEL_KERNEL_* entries,
// which describe the host's kernel if it runs in one), then the stub's defaults, then
// Spec.Env, then the transport's own entries: the bundle hash and
// KENNEL_KERNEL_OWNER_PID (Options.OwnerPID, else the controller's pid). A later entry
// wins; the transport's cannot be given in Spec.Env (kernelstart.Env).
//
// Spec.Dir must be an existing absolute directory. On error nothing is left running;
// errors.Is(err, transports.ErrUnavailable) when no usable interpreter was found, and a
// *transports.FieldError (errdefs.ErrInvalidArgument) for a Spec refused before anything
// started.
func (t *Transport) Start(ctx context.Context, spec transports.Spec) (transports.Kernel, error) {
	if err := checkSpec(spec); err != nil {
		return nil, fmt.Errorf("start local kernel %q: %w", spec.SessionID, err)
	}
	name := cmp.Or(spec.Python, t.opts.Python, "python3")
	python, err := t.pythons.get(ctx, name, func(ctx context.Context) (string, error) {
		res, err := images.PythonCache{Dir: t.opts.PythonCacheDir}.Resolve(ctx, name)
		return res.Path, err
	})
	if err != nil {
		return nil, fmt.Errorf("start local kernel %q: %w", spec.SessionID, err)
	}
	b, err := t.bundles.get(ctx, "", t.unpack)
	if err != nil {
		return nil, fmt.Errorf("start local kernel %q: %w", spec.SessionID, err)
	}

	host := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "KENNEL_KERNEL_") })
	env := kernelstart.Env{Base: host, Stub: images.KernelEnv(b.bundle), OwnerPID: cmp.Or(max(t.opts.OwnerPID, 0), os.Getpid())}
	if t.opts.RunDir != "" {
		k, err := t.startDetached(ctx, spec, python, b, env)
		if err != nil {
			return nil, fmt.Errorf("start local kernel %q: %w", spec.SessionID, err)
		}
		return k, nil
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start local kernel %q: %w", spec.SessionID, err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("start local kernel %q: %w", spec.SessionID, err)
	}
	proc, err := reaper.Start(ctx, reaper.Spec{
		Path:   t.opts.Reaper,
		Argv:   images.KernelArgv(python, b.dir),
		Env:    env.Build(spec.Env),
		Dir:    spec.Dir,
		Stdin:  inR,
		Stdout: outW,
		Stderr: spec.Stderr,
		Grace:  transports.ResolveGrace(t.opts.TermGrace),
	})
	// The kernel holds its ends now (or nobody does).
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("start local kernel %q: %w", spec.SessionID, err)
	}
	return newKernel(proc, inW, outR, transports.ResolveGrace(t.opts.StdinGrace), transports.ResolveGrace(t.opts.TermGrace)), nil
}

func (t *Transport) unpack(context.Context) (bundleDir, error) {
	var err error
	b := t.opts.Bundle
	if b == nil {
		if b, err = images.Stub(); err != nil {
			return bundleDir{}, err
		}
	}
	cacheDir := t.opts.CacheDir
	if cacheDir == "" {
		if cacheDir, err = images.DefaultCacheDir(); err != nil {
			return bundleDir{}, err
		}
	}
	dir, err := b.Unpack(cacheDir)
	if err != nil {
		return bundleDir{}, err
	}
	return bundleDir{bundle: b, dir: dir}, nil
}

// checkSpec refuses a Spec the kernel could not start from, before anything runs: the
// transports' rules, and a Dir that is an existing directory here.
func checkSpec(spec transports.Spec) error {
	if err := transports.CheckSpec(spec); err != nil {
		return err
	}
	if fi, err := os.Stat(spec.Dir); err != nil {
		return fmt.Errorf("%w: %w", &transports.FieldError{Field: "Spec.Dir", Reason: "not a directory here"}, err)
	} else if !fi.IsDir() {
		return &transports.FieldError{Field: "Spec.Dir", Reason: fmt.Sprintf("%q is not a directory", spec.Dir)}
	}
	return nil
}
