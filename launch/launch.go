package launch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	ctrdclient "github.com/containerd/containerd/v2/client"
	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/fshost"
	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/images/kernelimage"
	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/sessionspec"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/containerd"
	"github.com/kennel-dev/kennel/transports/docker"
	"github.com/kennel-dev/kennel/transports/kubernetes"
	"github.com/kennel-dev/kennel/transports/local"
	"github.com/kennel-dev/kennel/transports/ssh"
	"github.com/kennel-dev/kennel/transports/wrapped"
)

// Options configure a Kit. The zero value of each field is documented and usable.
type Options struct {
	// LookupEnv finds the host variables a description's env names. Nil means
	// os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Local configures the local transport (its Python is a description's when set).
	Local local.Options
	// Wrapped, Docker and SSH carry the graces of those transports (and, for tests, the
	// rest of their options); a description's fields take precedence over them.
	Wrapped wrapped.Options
	Docker  docker.Options
	SSH     ssh.Options
	// Containerd carries the graces (and, for tests, the rest of the options) of the
	// containerd transport; a description's fields take precedence.
	Containerd containerd.Options
	// Kubernetes carries the graces (and, for tests, the rest of the options) of the
	// Kubernetes transport; a description's fields take precedence. With RunDir set its
	// kernels are detached (Kubernetes.Detached).
	Kubernetes kubernetes.Options
	// Hosts configures the ssh connections the Kit keeps (one per host, shared by its
	// sessions).
	Hosts ssh.HostsOptions
	// Engine says which Docker Engine to use; the zero value is the one DOCKER_HOST names.
	Engine docker.ConnectOptions
	// RunDir, when set, makes kernels detached (docs/protocol.md, "Protocol 2"): they
	// outlive the controller and are reached again from their records. Local, Docker
	// run-mode and containerd kernels get their run directories under it (Local.RunDir,
	// Docker.RunDir, Containerd.RunDir, unless those are set); ssh kernels run detached on
	// their hosts (SSH.Detached), Kubernetes kernels beside a bridge in their pods
	// (Kubernetes.Detached). The
	// daemon sets it; `kennel run` leaves it empty (its kernel ends with the command).
	RunDir string
	// Pools say how many ready kernels to keep per kind once StartPools runs (none by
	// default).
	Pools Pools
}

// Kit assembles sessions from descriptions. It keeps what its sessions share: one local
// transport (each interpreter resolved once), one Docker Engine client, one containerd
// client per daemon address, and one ssh connection per host. It is safe for concurrent use; Close it when no session it
// assembled runs any more.
type Kit struct {
	opts Options

	mu     sync.Mutex
	localT *local.Transport
	engine *client.Client
	swept  bool
	hosts  *ssh.Hosts
	// ctrd holds the containerd clients by address, each swept once.
	ctrd map[string]*ctrdclient.Client
	// kube holds the Kubernetes clients by kubeconfig and context, each namespace swept
	// once (kubeSwept).
	kube      map[kubeKey]*kubernetes.Client
	kubeSwept map[string]bool
	// pools are the warm pools StartPools started, by kind; dockerPool, ctrdPool (of
	// the containerd at ctrdPoolAddr) and kubePool (of the default kubeconfig and
	// context) are those of each kind, or nil.
	pools        []kitPool
	dockerPool   *docker.Pool
	ctrdPool     *containerd.Pool
	ctrdPoolAddr string
	kubePool     *kubernetes.Pool
	closed       bool
}

// New returns a Kit that has started and connected nothing yet.
func New(opts Options) *Kit {
	if opts.LookupEnv == nil {
		opts.LookupEnv = os.LookupEnv
	}
	if opts.RunDir != "" {
		opts.Local.RunDir = cmp.Or(opts.Local.RunDir, opts.RunDir)
		opts.Docker.RunDir = cmp.Or(opts.Docker.RunDir, opts.RunDir)
		opts.Docker.DetachedOwner = cmp.Or(opts.Docker.DetachedOwner, DetachedOwner(opts.RunDir))
		opts.Containerd.RunDir = cmp.Or(opts.Containerd.RunDir, opts.RunDir)
		opts.SSH.Detached = true
		opts.Kubernetes.Detached = true
	}
	return &Kit{opts: opts}
}

// Close releases the engine client, the containerd clients and the ssh connections.
func (k *Kit) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, p := range k.pools {
		errs = append(errs, p.pool.Close(ctx))
	}
	k.pools, k.dockerPool, k.ctrdPool, k.kubePool = nil, nil, nil, nil
	if k.engine != nil {
		errs = append(errs, k.engine.Close())
		k.engine = nil
	}
	if k.hosts != nil {
		errs = append(errs, k.hosts.Close())
		k.hosts = nil
	}
	for addr, cli := range k.ctrd {
		errs = append(errs, cli.Close())
		delete(k.ctrd, addr)
	}
	return errors.Join(errs...)
}

// Parts are an assembled session: the transport its kernels start on and how the
// controller reaches its files. Give them to controller.Start through Options; Release
// them once the session has ended (or failed to start).
type Parts struct {
	// Kind is the description's kind (sessionspec.KindLocal, ...).
	Kind string
	// Transport starts the session's kernels.
	Transport transports.Transport
	// Dir is the session's working directory: a host path, checked (local, wrapped,
	// docker, containerd), or for ssh the remote host's path (Remote).
	Dir string
	// Remote reports that Dir is on the kernel's own host, not this machine.
	Remote bool
	// SandboxDir is Dir as the kernel sees it.
	SandboxDir string
	// Env are the kernel's entries from the host variables the description names, mapped
	// into the sandbox.
	Env []string
	// Python is the interpreter inside the sandbox ("": the transport's default).
	Python string
	// Handler serves the kernel's fs.* requests through the path map (or SFTP).
	Handler controller.HostHandler
	// Warnings are said once to the operator (environment entries left out, ...).
	Warnings []string

	release []func()
	once    sync.Once
}

// Release frees what the parts hold (the path map's directories, an SFTP session). It is
// safe to call more than once.
func (p *Parts) Release() {
	p.once.Do(func() {
		for i := len(p.release) - 1; i >= 0; i-- {
			p.release[i]()
		}
	})
}

// Apply fills o's Transport, Dir, RemoteDir, SandboxDir, Env, Python and Handler from p.
func (p *Parts) Apply(o controller.Options) controller.Options {
	o.Transport, o.Dir, o.RemoteDir, o.SandboxDir = p.Transport, p.Dir, p.Remote, p.SandboxDir
	o.Env, o.Python, o.Handler = p.Env, p.Python, p.Handler
	return o
}

// Assemble turns spec (nil: a local kernel) into a session's parts; dir is the session's
// working directory on this host (unused for ssh, whose directory is spec.SSH.Dir or the
// remote home). It validates spec first (a refusal is sessionspec.ErrInvalid, every bad
// field named) and checks dir once. It starts exactly the kind spec names, with that
// kind's lock-down, or returns an error and holds nothing.
func (k *Kit) Assemble(ctx context.Context, spec *sessionspec.Transport, dir string) (*Parts, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if spec != nil {
		for i, name := range spec.Env {
			if transports.Reserved(name) {
				return nil, &sessionspec.FieldError{Field: fmt.Sprintf("env[%d]", i), Err: fmt.Errorf("%s ties the kernel to its controller: the transport sets it, no description may", name)}
			}
		}
	}
	kind, _ := spec.Kind()
	p := &Parts{Kind: kind}
	var err error
	switch kind {
	case sessionspec.KindLocal:
		err = k.local(spec, dir, p)
	case sessionspec.KindWrapped:
		err = k.wrapped(ctx, spec, dir, p)
	case sessionspec.KindDocker:
		err = k.docker(ctx, spec, dir, p)
	case sessionspec.KindSSH:
		err = k.ssh(ctx, spec, p)
	case sessionspec.KindContainerd:
		err = k.containerd(ctx, spec, dir, p)
	case sessionspec.KindKubernetes:
		err = k.kubernetes(ctx, spec, dir, p)
	default:
		err = fmt.Errorf("assemble: kind %q: %w", kind, sessionspec.ErrInvalid)
	}
	if err != nil {
		p.Release()
		return nil, err
	}
	return p, nil
}

// hostMap checks dir and makes the path map of spec's mounts (the identity map of dir
// when there are none), owned by owner when not nil.
func hostMap(spec *sessionspec.Transport, dir string, owner *pathmap.Owner, p *Parts) (*pathmap.Map, error) {
	var mounts []pathmap.Mount
	if spec != nil {
		mounts = spec.PathMap
	}
	m, err := pathmap.New(pathmap.Config{Dir: dir, Mounts: mounts, Owner: owner})
	if err != nil {
		// The description's mounts (or its directory) cannot be served: a bad request,
		// whatever the file system said.
		return nil, fmt.Errorf("path map: %w: %w", sessionspec.ErrInvalid, err)
	}
	p.release = append(p.release, func() { _ = m.Close() })
	p.Dir, p.SandboxDir = dir, m.Dir()
	p.Handler = fshost.New(m, fshost.Options{})
	return m, nil
}

func (k *Kit) local(spec *sessionspec.Transport, dir string, p *Parts) error {
	if err := controller.CheckWorkingDir(dir); err != nil {
		return err
	}
	if _, err := hostMap(nil, dir, nil, p); err != nil {
		return err
	}
	if spec != nil {
		p.Python = spec.Python
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.localT == nil {
		k.localT = local.New(k.opts.Local)
	}
	p.Transport = k.localT
	return nil
}

// env maps the host variables spec names into the sandbox through m.
func (k *Kit) env(spec *sessionspec.Transport, m *pathmap.Map, p *Parts) {
	var host []string
	for _, name := range spec.Env {
		if v, ok := k.opts.LookupEnv(name); ok {
			host = append(host, name+"="+v)
		}
	}
	env, diags := m.MapEnv(host)
	p.Env = env
	p.Warnings = append(p.Warnings, diags...)
}

func (k *Kit) wrapped(ctx context.Context, spec *sessionspec.Transport, dir string, p *Parts) error {
	if err := controller.CheckWorkingDir(dir); err != nil {
		return err
	}
	m, err := hostMap(spec, dir, nil, p)
	if err != nil {
		return err
	}
	k.env(spec, m, p)
	o := k.opts.Wrapped
	o.ArgvPrefix = spec.ArgvPrefix
	p.Transport, p.Python = wrapped.New(o), spec.Python
	return nil
}

// probeMounts checks dir and makes a first, throwaway path map of spec at dir to find its
// mounts and the sandbox directory: a container kernel's user follows from them, and
// fs.write's files (the real map's owner) must be that user's too.
func probeMounts(spec *sessionspec.Transport, dir string) ([]pathmap.Mount, string, error) {
	if err := controller.CheckWorkingDir(dir); err != nil {
		return nil, "", err
	}
	probe := &Parts{}
	defer probe.Release()
	m, err := hostMap(spec, dir, nil, probe)
	if err != nil {
		return nil, "", err
	}
	return m.Mounts(), m.Dir(), nil
}

// ownedMap makes the path map of a container kernel's session (hostMap), its files
// given to the kernel's user, which userFor finds for the sandbox directory (a refusal
// names field, the description's user field), and maps spec's env through it.
func ownedMap[N uint32 | int64](k *Kit, spec *sessionspec.Transport, dir, sandboxDir string, p *Parts, field string, userFor func(string) (N, N, error)) error {
	uid, gid, err := userFor(sandboxDir)
	if err != nil {
		return &sessionspec.FieldError{Field: field, Err: err}
	}
	m, err := hostMap(spec, dir, otherOwner(pathmap.Owner{UID: int(uid), GID: int(gid)}), p)
	if err != nil {
		return err
	}
	k.env(spec, m, p)
	return nil
}

// limits are a description's memory limit in bytes and CPU limit in billionths of a
// CPU, each 0 for the transport's default and -1 for none.
func limits(d interface {
	MemoryBytes() (int64, error)
	NanoCPUs() (int64, error)
}) (mem, nano int64, err error) {
	if mem, err = d.MemoryBytes(); err != nil {
		return 0, 0, err
	}
	if nano, err = d.NanoCPUs(); err != nil {
		return 0, 0, err
	}
	return mem, nano, nil
}

// checkImage checks tr's image with check (the image store's Check) against the stub
// this build embeds: missing or stale, it fails the session at once.
func checkImage[C any](ctx context.Context, cli C, tr interface{ Image() (string, error) }, check func(context.Context, C, string, *images.Bundle) (kernelimage.Status, error)) error {
	b, err := images.Stub()
	if err != nil {
		return err
	}
	ref, err := tr.Image()
	if err != nil {
		return err
	}
	_, err = check(ctx, cli, ref, b)
	return err
}

// otherOwner is own as the owner fs.write gives its files, or nil when it is this
// process's own user (nothing to give).
func otherOwner(own pathmap.Owner) *pathmap.Owner {
	if own.UID == os.Geteuid() && own.GID == os.Getegid() {
		return nil
	}
	return &own
}
