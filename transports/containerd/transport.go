package containerd

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
	"github.com/kennel-dev/kennel/transports/internal/linked"
	"github.com/kennel-dev/kennel/transports/internal/nsmount"
)

// Name is the containerd transport's name, as in Info.Transport.
const Name = "containerd"

// LeaseTTL is how long a lease that holds a kernel's objects while they are made lives at
// most: a controller killed half-way through a start leaves nothing held longer.
const LeaseTTL = time.Minute

// Transport starts each kernel as the task of a container of its own in containerd. It is
// safe for concurrent use.
type Transport struct {
	cli    *client.Client
	opts   Options
	bundle func() (*images.Bundle, error)
}

// New returns a Transport over cli, a client of the daemon (Connect). It starts nothing and
// does not contact the daemon; Options are checked here: a refusal is a
// *transports.FieldError (errdefs.ErrInvalidArgument).
func New(cli *client.Client, opts Options) (*Transport, error) {
	if cli == nil {
		return nil, fmt.Errorf("new containerd transport: %w", &transports.FieldError{Field: "cli", Reason: "no containerd client"})
	}
	err := opts.check()
	if err != nil {
		return nil, err
	}
	if opts.Controller, err = opts.Controller.OrSelf(); err != nil {
		return nil, err
	}
	opts.Runtime = cmp.Or(opts.Runtime, DefaultRuntime)
	opts.Snapshotter = cmp.Or(opts.Snapshotter, DefaultSnapshotter)
	opts.FIFODir = cmp.Or(opts.FIFODir, DefaultFIFODir())
	opts.Mounts = append(opts.Mounts[:0:0], opts.Mounts...)
	return &Transport{cli: cli, opts: opts, bundle: sync.OnceValues(images.Stub)}, nil
}

// Name returns "containerd".
func (t *Transport) Name() string { return Name }

// Capabilities reports Detached with Options.RunDir, and nothing else: a container has its
// own environment, pids and file system (the path map's mounts are its bind mounts).
func (t *Transport) Capabilities() transports.Capabilities {
	return transports.Capabilities{Detached: t.opts.RunDir != ""}
}

// Image returns the kernel image the kernels run.
func (t *Transport) Image() (string, error) {
	if t.opts.Image != "" {
		return t.opts.Image, nil
	}
	b, err := t.bundle()
	if err != nil {
		return "", err
	}
	return Ref(b), nil
}

// ctx is ctx in the transport's namespace.
func nsCtx(ctx context.Context) context.Context { return namespaces.WithNamespace(ctx, Namespace) }

// Start launches a kernel and returns once its task runs; its hello is the first frame on
// Stdout. ctx bounds only the start. On error nothing is left: no task, container,
// snapshot, lease or FIFO.
//
// It checks the image first (a missing or stale image is an error matching
// transports.ErrUnavailable that names BuildCommand), then, under a lease of LeaseTTL
// labelled like the container, creates a container with a snapshot of the image and the
// OCI spec locked down as Options documents (see specOpts), both labelled with
// LabelKennel, LabelSession and the controller's labels; creates its task with stdin,
// stdout and stderr on FIFOs, subscribes to its OOM events, waits on it (before Start, so
// no exit is missed), and starts it. The kernel's environment is the image's, then PATH,
// HOME=/tmp and LANG=C.UTF-8, the stub's defaults, Spec.Env, then the transport's own
// entries (the bundle hash, KENNEL_KERNEL_OWNER=stdin, KENNEL_KERNEL_EOF_GRACE when set),
// a later key winning (kernelstart.Env). Spec.Python, when set, replaces the image's
// interpreter. A Spec refused before anything ran is a *transports.FieldError.
func (t *Transport) Start(ctx context.Context, spec transports.Spec) (_ transports.Kernel, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("start containerd kernel %q: %w", spec.SessionID, err)
		}
	}()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	if err := transports.CheckSpec(spec); err != nil {
		return nil, err
	}
	if t.opts.RunDir != "" && t.opts.Pool != nil {
		if k, err := t.opts.Pool.handOut(ctx, t, spec); k != nil || err != nil {
			return k, err
		}
	}
	st, err := t.create(ctx, spec, false)
	if err != nil {
		return nil, err
	}
	if st.runDir == "" {
		return newKernel(t, st.c, st.task, st.dio, spec, st.exitc, st.oom, st.evcancel), nil
	}
	k, err := st.attach(ctx, st.token+"\n")
	if err != nil {
		return nil, err
	}
	if t.opts.Pool != nil {
		k.SetPool(transports.PoolMiss)
	}
	return k, nil
}

// started is a kernel's container and task, started: an attached kernel's task, or a
// detached one's whose kernel waits for its token (or, pooled, its start block) on stdin.
type started struct {
	t        *Transport
	c        client.Container
	task     client.Task
	dio      *cio.DirectIO
	exitc    <-chan client.ExitStatus
	oom      *oomWatch
	evcancel context.CancelFunc
	// kid, token and runDir name a detached kernel ("": attached).
	kid, token, runDir string
	// exited and result say a detached task's end.
	exited <-chan struct{}
	result func() (transports.Exit, error)
	// imgEnv is the image's environment, the first layer of the kernel's; ns is a pooled
	// kernel's mount namespace, held until its hand-out.
	imgEnv []string
	ns     *os.File
}

// create makes, and starts, the container and task of a kernel for spec; pooled makes
// one for a Pool (no session yet: its kernel loads and waits for a start block). On error
// nothing is left: no task, container, snapshot, lease, FIFO or run directory.
func (t *Transport) create(ctx context.Context, spec transports.Spec, pooled bool) (_ *started, err error) {
	b, err := t.bundle()
	if err != nil {
		return nil, err
	}
	uid, gid, err := t.opts.UserFor(spec.Dir)
	if err != nil {
		return nil, err
	}
	ctx = nsCtx(ctx)
	ref, err := t.Image()
	if err != nil {
		return nil, err
	}
	_, img, err := check(ctx, t.cli, ref, b)
	if err != nil {
		return nil, err
	}
	if ok, err := img.img.IsUnpacked(ctx, t.opts.Snapshotter); err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, classify(err))
	} else if !ok {
		// The content is here (no registry): unpacking is local.
		if err := img.img.Unpack(ctx, t.opts.Snapshotter); err != nil {
			return nil, fmt.Errorf("unpack %s: %w", ref, classify(err))
		}
	}
	id := newID()
	st := &started{t: t, imgEnv: img.config.Env}
	labels := ownerLabels(t.opts.Controller, spec.SessionID)
	if t.opts.RunDir != "" {
		if st.kid, st.token, st.runDir, err = linked.NewRun(t.opts.RunDir, int(uid), int(gid), "containerd"); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				_ = os.RemoveAll(st.runDir)
			}
		}()
		labels[LabelDetached] = "1"
		if pooled {
			labels[LabelPool] = "1"
		}
	}

	var undo kernelstart.Undo
	defer undo.Run(ctx, &err)

	lctx, done, err := t.cli.WithLease(ctx, leases.WithRandomID(), leases.WithExpiration(LeaseTTL), leases.WithLabels(labels))
	if err != nil {
		return nil, fmt.Errorf("lease: %w", classify(err))
	}
	defer done(context.WithoutCancel(ctx))

	sopts := t.specOpts(img, spec, uid, gid)
	env := t.env(b, st.kid)
	if st.runDir != "" {
		sopts = append(sopts, runMount(st.runDir, insideRun(st.kid)))
	}
	kenv := env.Build(spec.Env)
	if pooled {
		kenv = append(kenv, images.EnvPooled+"=1")
	}
	sopts = append(sopts, oci.WithEnv(kenv))
	st.c, err = t.cli.NewContainer(lctx, id,
		client.WithContainerLabels(labels),
		client.WithSnapshotter(t.opts.Snapshotter),
		client.WithNewSnapshot(id, img.img, snapshots.WithLabels(labels)),
		client.WithRuntime(t.opts.shim()),
		client.WithNewSpec(sopts...),
	)
	if err != nil {
		// A snapshot prepared before the container record failed is removed too.
		_ = t.cli.SnapshotService(t.opts.Snapshotter).Remove(context.WithoutCancel(lctx), id)
		return nil, fmt.Errorf("create container: %w", classify(err))
	}
	undo = append(undo, func(ctx context.Context) { _ = st.c.Delete(ctx, client.WithSnapshotCleanup) })

	dir := filepath.Join(t.opts.FIFODir, id)
	st.dio, err = taskIO(dir, st.runDir == "") // a detached task's stdout is /dev/null
	if err != nil {
		return nil, err
	}
	undo = append(undo, func(context.Context) { st.dio.Cancel(); _ = st.dio.Close() })

	// OOM events of this container, subscribed before the task exists.
	var evctx context.Context
	evctx, st.evcancel = context.WithCancel(nsCtx(context.Background()))
	undo = append(undo, func(context.Context) { st.evcancel() })
	st.oom = watchOOM(evctx, t.cli, id)

	var tio cio.IO = st.dio
	if st.runDir != "" {
		tio = nullStdout{st.dio}
	}
	st.task, err = st.c.NewTask(ctx, func(string) (cio.IO, error) { return tio, nil })
	if err != nil {
		return nil, fmt.Errorf("create task: %w: %w", transports.ErrUnavailable, err)
	}
	undo = append(undo, func(ctx context.Context) { _, _ = st.task.Delete(ctx, client.WithProcessKill) })
	if st.exitc, err = st.task.Wait(nsCtx(context.Background())); err != nil {
		return nil, fmt.Errorf("wait task: %w", classify(err))
	}
	if err := st.task.Start(ctx); err != nil {
		return nil, fmt.Errorf("start task: %w: %w", transports.ErrUnavailable, err)
	}
	if st.runDir != "" {
		st.exited, st.result = taskEnd(st.exitc)
	}
	if pooled {
		pid := int(st.task.Pid())
		if st.ns, err = nsmount.Hold(pid, func() bool {
			s, err := st.task.Status(ctx)
			return err == nil && s.Status == client.Running && int(st.task.Pid()) == pid
		}); err != nil {
			return nil, fmt.Errorf("task %s: %w", id, err)
		}
	}
	return st, nil
}

// env is the transport's layer of a kernel's environment (kernelstart.Env); kid names a
// detached kernel ("" for none).
func (t *Transport) env(b *images.Bundle, kid string) kernelstart.Env {
	env := kernelstart.Env{
		Base:     []string{"PATH=" + kernelstart.DefaultPath, "HOME=/tmp", "LANG=C.UTF-8"},
		Stub:     images.KernelEnv(b),
		EOFGrace: t.opts.EOFGrace,
	}
	if kid != "" {
		env.Detached = insideRun(kid)
	}
	return env
}

// taskIO is a task's stdio on FIFOs of dir: stdin and stderr, and stdout when
// withStdout (an attached task's). A detached task's stdin carries its token, then closes;
// its stderr is what the kernel says before its kernel.log takes over; its stdout is
// /dev/null (nullStdout). They open in the background, once the shim opens its ends
// (context.Background: they must outlive the start's ctx).
func taskIO(dir string, withStdout bool) (*cio.DirectIO, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("fifo directory: %w", err)
	}
	cfg := cio.Config{Stdin: filepath.Join(dir, "stdin"), Stderr: filepath.Join(dir, "stderr")}
	if withStdout {
		cfg.Stdout = filepath.Join(dir, "stdout")
	}
	fifos := cio.NewFIFOSet(cfg, func() error { return os.RemoveAll(dir) })
	dio, err := cio.NewDirectIO(context.Background(), fifos)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("open fifos: %w", err)
	}
	return dio, nil
}

// newID is a fresh container id: "kennel-" and 16 hex digits.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails
	return "kennel-" + hex.EncodeToString(b[:])
}

// remove deletes container id of the namespace with whatever it still holds: its task
// (killed if it runs), its snapshot and its FIFO directory under fifoDir. Anything already
// gone is no error.
func remove(ctx context.Context, cli *client.Client, id, fifoDir string) error {
	ctx = nsCtx(ctx)
	c, err := cli.LoadContainer(ctx, id)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("load container %s: %w", id, err)
	}
	// A shim that exits as its task ends can close its connection in the middle of the
	// delete ("ttrpc: closed"): look at the task again, a few times, before giving up.
	for try := 0; ; try++ {
		task, err := c.Task(ctx, nil)
		if errdefs.IsNotFound(err) {
			break
		}
		if err == nil {
			if _, err = task.Delete(ctx, client.WithProcessKill); err == nil || errdefs.IsNotFound(err) {
				break
			}
		}
		if try == 4 || ctx.Err() != nil {
			return fmt.Errorf("delete task %s: %w", id, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := c.Delete(ctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete container %s: %w", id, err)
	}
	if fifoDir != "" {
		_ = os.RemoveAll(filepath.Join(fifoDir, id))
	}
	return nil
}

// shim is the runtime shim the containers run under and its options: Options.Runtime when
// it names a shim ("io.containerd.<name>.<version>"); otherwise DefaultRuntime, the runc
// shim, running Options.Runtime as its OCI runtime binary (BinaryName: "runsc", as
// Docker's `--runtime runsc` does).
func (o Options) shim() (string, any) {
	if IsShim(o.Runtime) {
		return o.Runtime, nil
	}
	return DefaultRuntime, &runcoptions.Options{BinaryName: o.Runtime}
}

// IsShim reports whether a runtime names a containerd shim ("io.containerd.runc.v2",
// "io.containerd.runsc.v1") rather than an OCI runtime binary the runc shim runs
// ("runsc", "/usr/local/bin/runsc", "crun").
func IsShim(runtime string) bool { return strings.HasPrefix(runtime, "io.containerd.") }
