package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/internal/reaper"
	"github.com/kennel-dev/kennel/transports"
)

// Name is the local transport's name, as in Info.Transport.
const Name = "local"

// ErrInvalidSpec reports a Spec the transport refuses before starting anything.
var ErrInvalidSpec = errors.New("invalid kernel spec")

// Options configures a Transport. The zero value of every field is documented and usable.
type Options struct {
	// CacheDir is where the stub bundle is unpacked (once per Transport). Empty means
	// images.DefaultCacheDir().
	CacheDir string
	// Python is the interpreter used when Spec.Python is empty: a name looked up on PATH
	// or a path. Empty means "python3". Each name is resolved once per Transport to the
	// real interpreter's absolute path (images.ResolvePython), so no kernel start runs a
	// shim such as pyenv's.
	Python string
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

// Capabilities reports that local kernels see the host's environment, pids and files.
func (t *Transport) Capabilities() transports.Capabilities {
	return transports.Capabilities{HostEnv: true, HostPIDs: true, SameFS: true}
}

// Start launches a kernel and returns once its process runs (not once it said hello:
// the hello is the first frame on Stdout). ctx bounds only the start.
//
// The kernel's environment is the host's (minus the host's own KENNEL_KERNEL_* entries),
// then KENNEL_KERNEL_OWNER_PID set to the controller's pid, then the stub's entries
// (images.KernelEnv), then Spec.Env: a later entry wins, so Spec.Env may override the
// owner pid (a kernel that should end with another process) or any other entry.
//
// Spec.Dir must be an existing absolute directory. On error nothing is left running;
// errors.Is(err, transports.ErrUnavailable) when no usable interpreter was found, and
// ErrInvalidSpec for a Spec refused before anything started.
func (t *Transport) Start(ctx context.Context, spec transports.Spec) (transports.Kernel, error) {
	if err := checkSpec(spec); err != nil {
		return nil, fmt.Errorf("start local kernel %q: %w", spec.SessionID, err)
	}
	name := spec.Python
	if name == "" {
		name = t.opts.Python
	}
	if name == "" {
		name = "python3"
	}
	python, err := t.pythons.get(ctx, name, func(ctx context.Context) (string, error) {
		return images.ResolvePython(ctx, name)
	})
	if err != nil {
		return nil, fmt.Errorf("start local kernel %q: %w", spec.SessionID, err)
	}
	b, err := t.bundles.get(ctx, "", t.unpack)
	if err != nil {
		return nil, fmt.Errorf("start local kernel %q: %w", spec.SessionID, err)
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
		Env:    kernelEnv(os.Environ(), os.Getpid(), images.KernelEnv(b.bundle), spec.Env),
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
	b, err := images.Stub()
	if err != nil {
		return bundleDir{}, err
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

// checkSpec refuses a Spec the kernel could not start from, before anything runs.
func checkSpec(spec transports.Spec) error {
	if spec.SessionID == "" {
		return fmt.Errorf("no session id: %w", ErrInvalidSpec)
	}
	if spec.Dir == "" || !filepath.IsAbs(spec.Dir) {
		return fmt.Errorf("dir %q is not an absolute path: %w", spec.Dir, ErrInvalidSpec)
	}
	if fi, err := os.Stat(spec.Dir); err != nil {
		return fmt.Errorf("dir %q: %w: %w", spec.Dir, ErrInvalidSpec, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("dir %q is not a directory: %w", spec.Dir, ErrInvalidSpec)
	}
	for _, kv := range spec.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsRune(kv, 0) {
			return fmt.Errorf("env entry %q is not KEY=VALUE: %w", kv, ErrInvalidSpec)
		}
	}
	return nil
}

// kernelEnv builds the kernel's environment: host (without its KENNEL_KERNEL_* entries,
// which describe the host's own kernel if it runs in one), the owner pid, the stub's
// entries, then spec's. A later entry of the same key replaces an earlier one in place.
func kernelEnv(host []string, owner int, stub, spec []string) []string {
	out := make([]string, 0, len(host)+len(stub)+len(spec)+1)
	index := make(map[string]int, cap(out))
	add := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := index[k]; ok {
			out[i] = kv
			return
		}
		index[k] = len(out)
		out = append(out, kv)
	}
	for _, kv := range host {
		if !strings.HasPrefix(kv, "KENNEL_KERNEL_") {
			add(kv)
		}
	}
	add(images.EnvOwnerPID + "=" + strconv.Itoa(owner))
	for _, kv := range stub {
		add(kv)
	}
	for _, kv := range spec {
		add(kv)
	}
	return out
}
