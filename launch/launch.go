package launch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	// dockerPool and ctrdPool are the warm pools (StartPools), or nil; ctrdPool keeps
	// kernels of the containerd at ctrdPoolAddr.
	dockerPool   *docker.Pool
	ctrdPool     *containerd.Pool
	ctrdPoolAddr string
	closed       bool
}

// New returns a Kit that has started and connected nothing yet.
func New(opts Options) *Kit {
	if opts.LookupEnv == nil {
		opts.LookupEnv = os.LookupEnv
	}
	if opts.RunDir != "" {
		if opts.Local.RunDir == "" {
			opts.Local.RunDir = opts.RunDir
		}
		if opts.Docker.RunDir == "" {
			opts.Docker.RunDir = opts.RunDir
		}
		if opts.Docker.DetachedOwner == "" {
			opts.Docker.DetachedOwner = DetachedOwner(opts.RunDir)
		}
		if opts.Containerd.RunDir == "" {
			opts.Containerd.RunDir = opts.RunDir
		}
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
	if k.dockerPool != nil {
		errs = append(errs, k.dockerPool.Close(ctx))
		k.dockerPool = nil
	}
	if k.ctrdPool != nil {
		errs = append(errs, k.ctrdPool.Close(ctx))
		k.ctrdPool = nil
	}
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

// dockerOptions is the transport's options for d, the description's docker fields, with
// mounts as its bind mounts.
func (k *Kit) dockerOptions(d *sessionspec.Docker, mounts []pathmap.Mount) (docker.Options, error) {
	o := k.opts.Docker
	o.Image, o.Container, o.Network, o.Pids, o.Runtime, o.User = d.Image, d.Container, d.Network, d.Pids, d.Runtime, d.User
	var err error
	if o.Memory, err = d.MemoryBytes(); err != nil {
		return o, err
	}
	if o.NanoCPUs, err = d.NanoCPUs(); err != nil {
		return o, err
	}
	if d.Container == "" {
		o.Mounts = mounts
	} else {
		o.RunDir = "" // a host directory: an exec-mode kernel's run directory is in its container
	}
	return o, nil
}

func (k *Kit) docker(ctx context.Context, spec *sessionspec.Transport, dir string, p *Parts) error {
	if err := controller.CheckWorkingDir(dir); err != nil {
		return err
	}
	mounts, sandboxDir, err := probeMounts(spec, dir)
	if err != nil {
		return err
	}
	o, err := k.dockerOptions(spec.Docker, mounts)
	if err != nil {
		return err
	}
	var owner *pathmap.Owner
	if o.Container == "" {
		o.Pool = k.pool()
		if own, ok := numericOwner(o.UserFor(sandboxDir)); ok {
			owner = otherOwner(own)
		}
	}
	m, err := hostMap(spec, dir, owner, p)
	if err != nil {
		return err
	}
	k.env(spec, m, p)
	cli, err := k.engineClient(ctx)
	if err != nil {
		return err
	}
	tr, err := docker.New(cli, o)
	if err != nil {
		return err
	}
	if o.Container == "" {
		// Check the image now: a missing or stale one fails the session at once, naming
		// `kennel image build`.
		b, err := images.Stub()
		if err != nil {
			return err
		}
		ref, err := tr.Image()
		if err != nil {
			return err
		}
		if _, err := kernelimage.Check(ctx, cli, ref, b); err != nil {
			return err
		}
	}
	p.Transport, p.Python = tr, spec.Python
	return nil
}

// probeMounts makes a first, throwaway path map of spec at dir to find its mounts and
// the sandbox directory: a container kernel's user follows from them, and fs.write's files
// (the real map's owner) must be that user's too.
func probeMounts(spec *sessionspec.Transport, dir string) ([]pathmap.Mount, string, error) {
	probe := &Parts{}
	defer probe.Release()
	m, err := hostMap(spec, dir, nil, probe)
	if err != nil {
		return nil, "", err
	}
	return m.Mounts(), m.Dir(), nil
}

// otherOwner is own as the owner fs.write gives its files, or nil when it is this
// process's own user (nothing to give).
func otherOwner(own pathmap.Owner) *pathmap.Owner {
	if own.UID == os.Geteuid() && own.GID == os.Getegid() {
		return nil
	}
	return &own
}

// numericOwner parses a "uid:gid" user.
func numericOwner(user string) (pathmap.Owner, bool) {
	d := sessionspec.Docker{User: user}
	uid, gid, numeric, err := d.NumericUser()
	if !numeric || err != nil {
		return pathmap.Owner{}, false
	}
	return pathmap.Owner{UID: uid, GID: gid}, true
}

// engineClient returns the Kit's engine client, connecting (and sweeping the containers
// of controllers that are gone) on first use.
func (k *Kit) engineClient(ctx context.Context) (*client.Client, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, fmt.Errorf("docker engine: kit closed: %w", transports.ErrUnavailable)
	}
	if k.engine == nil {
		cli, err := docker.Connect(ctx, k.opts.Engine)
		if err != nil {
			return nil, err
		}
		k.engine = cli
	}
	if !k.swept {
		if _, err := docker.Sweep(ctx, k.engine, docker.SweepOptions{Keep: func(string) bool { return true }}); err != nil {
			return nil, fmt.Errorf("docker sweep: %w", err)
		}
		k.swept = true
	}
	return k.engine, nil
}

// SweepDocker removes the containers of controllers of this host that are gone, as a
// controller does when it starts (kennel serve). With no engine reachable it returns an
// error matching transports.ErrUnavailable at once and changes nothing.
//
// held, when not nil, says which detached kernels' containers a record of this Kit's
// state still holds: the Kit's other detached containers (labelled with its
// DetachedOwner) are removed too.
func (k *Kit) SweepDocker(ctx context.Context, held func(containerID string) bool) (docker.SweepResult, error) {
	o := docker.EngineSweepOptions{ConnectOptions: k.opts.Engine}
	if held != nil {
		o.Owner, o.Held = k.opts.Docker.DetachedOwner, held
		if p := k.pool(); p != nil {
			o.Pool = p.Instance()
		}
	}
	return docker.SweepEngine(ctx, o)
}

// ctrdAddress is a containerd address as the Kit keys its clients: no unix:// scheme,
// empty as containerd.DefaultAddress.
func ctrdAddress(addr string) string {
	addr = strings.TrimPrefix(addr, "unix://")
	if addr == "" {
		addr = containerd.DefaultAddress
	}
	return addr
}

// DetachedOwner is the owner label of the detached containers of a state whose run
// directory is runDir: a digest of its absolute path.
func DetachedOwner(runDir string) string {
	if abs, err := filepath.Abs(runDir); err == nil {
		runDir = abs
	}
	sum := sha256.Sum256([]byte(runDir))
	return hex.EncodeToString(sum[:8])
}

// Hosts returns the ssh connections and probe cache the Kit's ssh sessions share,
// making them (reading the ssh config, connecting nowhere) on first use. It fails with
// an error matching ssh.ErrUnreachable once the Kit is closed, and with NewHosts's error
// when Options.Hosts cannot be used. The Hosts stays the Kit's: the caller must not
// Close it.
func (k *Kit) Hosts() (*ssh.Hosts, error) { return k.sshHosts() }

// sshHosts returns the Kit's ssh connections.
func (k *Kit) sshHosts() (*ssh.Hosts, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, fmt.Errorf("ssh: kit closed: %w", ssh.ErrUnreachable)
	}
	if k.hosts == nil {
		h, err := ssh.NewHosts(k.opts.Hosts)
		if err != nil {
			return nil, err
		}
		k.hosts = h
	}
	return k.hosts, nil
}

func (k *Kit) ssh(ctx context.Context, spec *sessionspec.Transport, p *Parts) error {
	hosts, err := k.sshHosts()
	if err != nil {
		return err
	}
	target := spec.SSH.Target
	probe := hosts.Probe(ctx, target)
	if probe.Status != ssh.StatusReady {
		return fmt.Errorf("ssh %s: %w", target, probe.Err)
	}
	dir := spec.SSH.Dir
	if dir == "" {
		dir = probe.Home
	}
	var handler controller.HostHandler
	fs, err := hosts.OpenFS(ctx, target+":"+dir, ssh.FSOptions{})
	switch {
	case errors.Is(err, ssh.ErrNoSFTP):
		// Cells run all the same; fs.* requests say why they cannot.
		handler = ssh.NoSFTP{Host: target}
		p.Warnings = append(p.Warnings, fmt.Sprintf("remote workspace %s:%s: %v: fs.* requests will answer unavailable", target, dir, err))
	case err != nil:
		return fmt.Errorf("remote workspace %s:%s: %w", target, dir, err)
	default:
		p.release = append(p.release, func() { _ = fs.Close() })
		handler = fs
	}
	o := k.opts.SSH
	o.Target = target
	p.Transport = ssh.New(hosts, o)
	p.Dir, p.Remote, p.SandboxDir, p.Handler, p.Python = dir, true, dir, handler, spec.Python
	return nil
}

// containerdOptions is the transport's options for c, the description's containerd
// fields, with mounts as its bind mounts.
func (k *Kit) containerdOptions(c *sessionspec.Containerd, mounts []pathmap.Mount) (containerd.Options, error) {
	o := k.opts.Containerd
	if c.Image != "" {
		o.Image = c.Image
	}
	if c.Runtime != "" {
		o.Runtime = c.Runtime
	}
	if c.User != "" {
		o.User = c.User
	}
	if c.Pids != 0 {
		o.Pids = c.Pids
	}
	mem, err := c.MemoryBytes()
	if err != nil {
		return o, err
	}
	if mem != 0 {
		o.Memory = mem
	}
	nano, err := c.NanoCPUs()
	if err != nil {
		return o, err
	}
	switch {
	case nano < 0:
		o.CPUQuota = -1
	case nano > 0:
		// CFS quota per containerd.DefaultCPUPeriod (100 ms): a CPU is 100 000 µs.
		o.CPUQuota = max(1_000, nano*containerd.DefaultCPUPeriod/1_000_000_000)
	}
	o.Mounts = mounts
	return o, nil
}

func (k *Kit) containerd(ctx context.Context, spec *sessionspec.Transport, dir string, p *Parts) error {
	if err := controller.CheckWorkingDir(dir); err != nil {
		return err
	}
	mounts, sandboxDir, err := probeMounts(spec, dir)
	if err != nil {
		return err
	}
	o, err := k.containerdOptions(spec.Containerd, mounts)
	if err != nil {
		return err
	}
	uid, gid, err := o.UserFor(sandboxDir)
	if err != nil {
		return &sessionspec.FieldError{Field: "containerd.user", Err: err}
	}
	m, err := hostMap(spec, dir, otherOwner(pathmap.Owner{UID: int(uid), GID: int(gid)}), p)
	if err != nil {
		return err
	}
	k.env(spec, m, p)
	addr := spec.Containerd.Address
	cli, err := k.containerdClient(ctx, addr)
	if err != nil {
		return err
	}
	o.Pool = k.ctrdPoolFor(ctrdAddress(addr))
	tr, err := containerd.New(cli, o)
	if err != nil {
		return err
	}
	// Check the image now: a missing or stale one fails the session at once, naming
	// `kennel image build --containerd` (with the daemon's --address when not the
	// default).
	b, err := images.Stub()
	if err != nil {
		return err
	}
	ref, err := tr.Image()
	if err != nil {
		return err
	}
	if _, err := containerd.Check(ctx, cli, ref, b); err != nil {
		if a := strings.TrimPrefix(addr, "unix://"); a != "" && a != containerd.DefaultAddress && (errors.Is(err, containerd.ErrImageMissing) || errors.Is(err, containerd.ErrImageStale)) {
			return fmt.Errorf("containerd %s: %w (give it --address %s)", addr, err, addr)
		}
		return fmt.Errorf("containerd %s: %w", orDefault(addr, containerd.DefaultAddress), err)
	}
	p.Transport, p.Python = tr, spec.Python
	return nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// containerdClient returns the Kit's client of the containerd at addr (empty: the
// default), connecting and sweeping what controllers that are gone left there on first
// use. Sessions on the same daemon share it.
func (k *Kit) containerdClient(ctx context.Context, addr string) (*ctrdclient.Client, error) {
	addr = ctrdAddress(addr)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, fmt.Errorf("containerd %s: kit closed: %w", addr, transports.ErrUnavailable)
	}
	if cli := k.ctrd[addr]; cli != nil {
		return cli, nil
	}
	cli, err := containerd.Connect(ctx, containerd.ConnectOptions{Address: addr})
	if err != nil {
		return nil, err
	}
	so := containerd.SweepOptions{Keep: func(string) bool { return true }, Snapshotter: k.opts.Containerd.Snapshotter, FIFODir: k.opts.Containerd.FIFODir, Self: k.opts.Containerd.Controller}
	if _, err := containerd.Sweep(ctx, cli, so); err != nil {
		cli.Close()
		return nil, fmt.Errorf("containerd %s sweep: %w", addr, err)
	}
	if k.ctrd == nil {
		k.ctrd = map[string]*ctrdclient.Client{}
	}
	k.ctrd[addr] = cli
	return cli, nil
}

// kubeKey names a cluster connection: a kubeconfig file and a context of it.
type kubeKey struct{ config, context string }

// kubernetesOptions is the transport's options for d, the description's kubernetes
// fields, with mounts as its hostPath volumes.
func (k *Kit) kubernetesOptions(d *sessionspec.Kubernetes, mounts []pathmap.Mount) (kubernetes.Options, error) {
	o := k.opts.Kubernetes
	if d.Namespace != "" {
		o.Namespace = d.Namespace
	}
	if d.Image != "" {
		o.Image = d.Image
	}
	if d.Node != "" {
		o.Node = d.Node
	}
	if d.User != "" {
		o.User = d.User
	}
	if d.Network == "cluster" {
		o.AllowNetwork = true
	}
	mem, err := d.MemoryBytes()
	if err != nil {
		return o, err
	}
	if mem != 0 {
		o.Memory = mem
	}
	nano, err := d.NanoCPUs()
	if err != nil {
		return o, err
	}
	switch {
	case nano < 0:
		o.MilliCPU = -1
	case nano > 0:
		o.MilliCPU = max(1, nano/1_000_000)
	}
	o.Mounts = mounts
	return o, nil
}

// kubernetes assembles a pod kernel. With a pathMap (and kubernetes.node, the
// controller's own node) its mounts are hostPath volumes and fs.* is served through the
// path map from the same files; without one the pod shares no files with the controller:
// the kernel works in its pod's /tmp and fs.* answers unavailable, saying why.
func (k *Kit) kubernetes(ctx context.Context, spec *sessionspec.Transport, dir string, p *Parts) error {
	d := spec.Kubernetes
	var mounts []pathmap.Mount
	sandboxDir := "/tmp"
	if len(spec.PathMap) > 0 {
		if err := controller.CheckWorkingDir(dir); err != nil {
			return err
		}
		var err error
		if mounts, sandboxDir, err = probeMounts(spec, dir); err != nil {
			return err
		}
	}
	o, err := k.kubernetesOptions(d, mounts)
	if err != nil {
		return err
	}
	if len(mounts) > 0 {
		uid, gid, err := o.UserFor(sandboxDir)
		if err != nil {
			return &sessionspec.FieldError{Field: "kubernetes.user", Err: err}
		}
		m, err := hostMap(spec, dir, otherOwner(pathmap.Owner{UID: int(uid), GID: int(gid)}), p)
		if err != nil {
			return err
		}
		k.env(spec, m, p)
	} else {
		m, err := pathmap.New(pathmap.Config{Dir: sandboxDir, Mounts: []pathmap.Mount{{Sandbox: sandboxDir, Host: sandboxDir}}})
		if err == nil {
			k.env(spec, m, p) // no mounts: the host's values pass unmapped
			m.Close()
		}
		p.Dir, p.Remote, p.SandboxDir = sandboxDir, true, sandboxDir
		p.Handler = kubernetes.Unserved{Reason: fmt.Errorf("the kernel's pod shares no files with the controller: give the session a pathMap and kubernetes.node (the controller's own node) to serve fs requests: %w", transports.ErrUnavailable)}
	}
	cli, err := k.kubeClient(ctx, d.Kubeconfig, d.Context)
	if err != nil {
		return err
	}
	tr, err := kubernetes.New(cli, o)
	if err != nil {
		return err
	}
	if err := k.kubeSweep(ctx, cli, tr.Namespace()); err != nil {
		return err
	}
	p.Transport, p.Python = tr, spec.Python
	return nil
}

// kubeClient returns the Kit's client of the cluster a kubeconfig and context name,
// connecting on first use. Sessions on the same daemon share it.
func (k *Kit) kubeClient(ctx context.Context, config, kctx string) (*kubernetes.Client, error) {
	key := kubeKey{config, kctx}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, fmt.Errorf("kubernetes: kit closed: %w", transports.ErrUnavailable)
	}
	if cli := k.kube[key]; cli != nil {
		return cli, nil
	}
	cli, err := kubernetes.Connect(ctx, kubernetes.ConnectOptions{Kubeconfig: config, Context: kctx})
	if err != nil {
		return nil, err
	}
	if k.kube == nil {
		k.kube = map[kubeKey]*kubernetes.Client{}
	}
	k.kube[key] = cli
	return cli, nil
}

// kubeSweep removes, once per namespace, the pods that controllers which are gone left
// there (kubernetes.Sweep; detached pods a record may hold are kept).
func (k *Kit) kubeSweep(ctx context.Context, cli *kubernetes.Client, ns string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.kubeSwept[ns] {
		return nil
	}
	so := kubernetes.SweepOptions{Namespace: ns, Self: k.opts.Kubernetes.Controller, Keep: func(string) bool { return true }}
	if _, err := kubernetes.Sweep(ctx, cli, so); err != nil {
		return fmt.Errorf("kubernetes namespace %s sweep: %w", ns, err)
	}
	if k.kubeSwept == nil {
		k.kubeSwept = map[string]bool{}
	}
	k.kubeSwept[ns] = true
	return nil
}
