package docker

import (
	"context"
	"fmt"
	"path"
	"sync"

	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/images/kernelimage"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
)

// Name is the Docker transport's name, as in Info.Transport.
const Name = "docker"

// Transport starts kernels in Docker containers (run mode) or as execs in an existing
// container (exec mode). It is safe for concurrent use.
type Transport struct {
	cli    client.APIClient
	opts   Options
	bundle func() (bundleCache, error)
}

type bundleCache struct {
	bundle  *images.Bundle
	payload []byte // BootstrapPayload, exec mode only
}

// New returns a Transport over cli, a client of the engine (client.New(client.FromEnv)
// for the machine's). It starts nothing and does not contact the engine; Options are
// checked here: a refusal is a *transports.FieldError (errdefs.ErrInvalidArgument).
func New(cli client.APIClient, opts Options) (*Transport, error) {
	if cli == nil {
		return nil, fmt.Errorf("new docker transport: %w", &transports.FieldError{Field: "cli", Reason: "no engine client"})
	}
	err := opts.check()
	if err != nil {
		return nil, err
	}
	if opts.Controller, err = opts.Controller.OrSelf(); err != nil {
		return nil, err
	}
	opts.Mounts = append(opts.Mounts[:0:0], opts.Mounts...)
	exec := opts.Container != ""
	if opts.RunDir != "" {
		opts.RunDir = path.Clean(opts.RunDir)
	}
	return &Transport{cli: cli, opts: opts, bundle: sync.OnceValues(func() (bundleCache, error) {
		b, err := images.Stub()
		if err != nil {
			return bundleCache{}, err
		}
		bc := bundleCache{bundle: b}
		if exec {
			if bc.payload, err = b.BootstrapPayload(); err != nil {
				return bundleCache{}, err
			}
		}
		return bc, nil
	})}, nil
}

// Name returns "docker".
func (t *Transport) Name() string { return Name }

// Capabilities reports only whether kernels are detached (Options.RunDir, either mode): a
// container has its own environment, pids and file system (the path map's mounts are its
// bind mounts).
func (t *Transport) Capabilities() transports.Capabilities {
	return transports.Capabilities{Detached: t.opts.RunDir != ""}
}

// Image returns the kernel image run mode uses.
func (t *Transport) Image() (string, error) {
	if t.opts.Image != "" {
		return t.opts.Image, nil
	}
	bc, err := t.bundle()
	if err != nil {
		return "", err
	}
	return kernelimage.KernelRef(bc.bundle), nil
}

// Start launches a kernel and returns once it runs; its hello is the first frame on
// Stdout. ctx bounds only the start. On error nothing is left: a container created is
// removed.
//
// Run mode checks the image first (kernelimage.Check: a missing or stale image is an
// error matching transports.ErrUnavailable that names `kennel image build`), creates the
// container locked down as Options documents, labelled with LabelKennel, LabelSession and
// the controller's labels, attaches its stdin, stdout and stderr, and starts it. The
// kernel's environment is exactly: PATH, HOME=/tmp and LANG=C.UTF-8, the stub's defaults,
// Spec.Env, then the transport's own entries (the bundle hash, KENNEL_KERNEL_OWNER=stdin,
// KENNEL_KERNEL_EOF_GRACE when set; in exec mode KENNEL_REMOTE_RUN, the run's marker), a
// later key winning and the transport's never given in Spec.Env (kernelstart.Env).
// Spec.Python, when set, replaces the image's interpreter (the stub is the image's).
//
// Exec mode creates an exec of the stub's bootstrap in Options.Container with the same
// environment and Spec.Dir as its working directory, and sends the bundle over stdin
// before the first frame. A Spec refused before anything ran is a
// *transports.FieldError (errdefs.ErrInvalidArgument).
//
// With Options.RunDir the kernel is detached in either mode (see the package doc,
// "Detached kernels"): Start returns once its link's first handshake is made, and the
// kernel is a transports.Detachable.
func (t *Transport) Start(ctx context.Context, spec transports.Spec) (transports.Kernel, error) {
	if err := context.Cause(ctx); err != nil {
		return nil, fmt.Errorf("start docker kernel %q: %w", spec.SessionID, err)
	}
	if err := transports.CheckSpec(spec); err != nil {
		return nil, fmt.Errorf("start docker kernel %q: %w", spec.SessionID, err)
	}
	bc, err := t.bundle()
	if err != nil {
		return nil, fmt.Errorf("start docker kernel %q: %w", spec.SessionID, err)
	}
	var k transports.Kernel
	if t.opts.Container != "" && t.opts.RunDir != "" {
		k, err = t.startExecDetached(ctx, bc, spec)
	} else if t.opts.Container != "" {
		k, err = t.startExec(ctx, bc, spec)
	} else if t.opts.RunDir != "" {
		k, err = t.startDetached(ctx, bc, spec)
	} else {
		k, err = t.startRun(ctx, bc, spec)
	}
	if err != nil {
		return nil, fmt.Errorf("start docker kernel %q: %w", spec.SessionID, err)
	}
	return k, nil
}

// env is the kernel's whole environment; run is the exec-mode run's marker ("" in run
// mode), detached a detached kernel's run directory in its container ("" for none).
func (t *Transport) env(b *images.Bundle, spec transports.Spec, run, detached string) []string {
	e := kernelstart.Env{
		Base:     []string{"PATH=" + kernelstart.DefaultPath, "HOME=/tmp", "LANG=C.UTF-8"},
		Stub:     images.KernelEnv(b),
		EOFGrace: t.opts.EOFGrace,
		Run:      run,
		Detached: detached,
	}
	return e.Build(spec.Env)
}
