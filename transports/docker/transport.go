package docker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/images/kernelimage"
	"github.com/kennel-dev/kennel/transports"
)

// Name is the Docker transport's name, as in Info.Transport.
const Name = "docker"

// ErrInvalidOptions reports Options or a Spec refused before anything runs.
var ErrInvalidOptions = errors.New("invalid docker transport options")

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
// checked here.
func New(cli client.APIClient, opts Options) (*Transport, error) {
	if cli == nil {
		return nil, fmt.Errorf("no engine client: %w", ErrInvalidOptions)
	}
	if err := opts.check(); err != nil {
		return nil, err
	}
	if opts.Controller.IsZero() {
		self, err := Self()
		if err != nil {
			return nil, err
		}
		opts.Controller = self
	}
	opts.Mounts = append(opts.Mounts[:0:0], opts.Mounts...)
	exec := opts.Container != ""
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

// Capabilities reports none: a container has its own environment, pids and file system
// (the path map's mounts are its bind mounts).
func (t *Transport) Capabilities() transports.Capabilities { return transports.Capabilities{} }

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
// kernel's environment is exactly: PATH, HOME=/tmp, the stub's entries, KENNEL_KERNEL_OWNER
// =stdin, KENNEL_KERNEL_EOF_GRACE when set, then Spec.Env (a later key wins). Spec.Python,
// when set, replaces the image's interpreter (the stub is the image's).
//
// Exec mode creates an exec of the stub's bootstrap in Options.Container with the same
// environment and Spec.Dir as its working directory, and sends the bundle over stdin
// before the first frame.
func (t *Transport) Start(ctx context.Context, spec transports.Spec) (transports.Kernel, error) {
	if err := context.Cause(ctx); err != nil {
		return nil, fmt.Errorf("start docker kernel %q: %w", spec.SessionID, err)
	}
	if err := checkSpec(spec); err != nil {
		return nil, fmt.Errorf("start docker kernel %q: %w", spec.SessionID, err)
	}
	bc, err := t.bundle()
	if err != nil {
		return nil, fmt.Errorf("start docker kernel %q: %w", spec.SessionID, err)
	}
	var k transports.Kernel
	if t.opts.Container != "" {
		k, err = t.startExec(ctx, bc, spec)
	} else {
		k, err = t.startRun(ctx, bc, spec)
	}
	if err != nil {
		return nil, fmt.Errorf("start docker kernel %q: %w", spec.SessionID, err)
	}
	return k, nil
}

func checkSpec(spec transports.Spec) error {
	if spec.SessionID == "" {
		return fmt.Errorf("no session id: %w", ErrInvalidOptions)
	}
	if !strings.HasPrefix(spec.Dir, "/") || strings.IndexByte(spec.Dir, 0) >= 0 {
		return fmt.Errorf("dir %q is not an absolute sandbox path: %w", spec.Dir, ErrInvalidOptions)
	}
	if p := spec.Python; p != "" && (strings.IndexByte(p, 0) >= 0 || strings.HasPrefix(p, "-")) {
		return fmt.Errorf("python %q: %w", p, ErrInvalidOptions)
	}
	for _, kv := range spec.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
			return fmt.Errorf("env entry %q is not KEY=VALUE: %w", kv, ErrInvalidOptions)
		}
	}
	return nil
}

// kernelEnv is the kernel's whole environment: defaults, then extra, a later key
// replacing an earlier one in place.
func kernelEnv(defaults, extra []string) []string {
	idx := map[string]int{}
	var out []string
	for _, kv := range append(append([]string(nil), defaults...), extra...) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// defaultEnv is what every kernel gets before Spec.Env.
func (t *Transport) defaultEnv(b *images.Bundle) []string {
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp", "LANG=C.UTF-8"}
	env = append(env, images.KernelEnv(b)...)
	env = append(env, images.EnvOwner+"=stdin")
	if g := t.opts.EOFGrace; g > 0 {
		env = append(env, images.EnvEOFGrace+"="+strconv.FormatFloat(g.Seconds(), 'f', -1, 64))
	}
	return env
}
