package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/images/kernelimage"
	"github.com/kennel-dev/kennel/link"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
	"github.com/kennel-dev/kennel/transports/internal/limits"
	"github.com/kennel-dev/kennel/transports/internal/linked"
	"github.com/kennel-dev/kennel/transports/internal/nsmount"
)

// ContainerRunRoot is where a detached kernel's run directory is mounted in its
// container: ContainerRunRoot/<id>.
const ContainerRunRoot = "/run/kennel"

// LabelDetached marks the container of a detached kernel: it outlives its controller, so
// no sweep of a dead controller's containers takes it.
const LabelDetached = "dev.kennel.detached"

// LabelDetachedOwner names the controller state a detached kernel's container belongs to
// (Options.DetachedOwner).
const LabelDetachedOwner = "dev.kennel.detached.owner"

// detachedKernel is a run-mode kernel reached over kernel.sock in its bind-mounted run
// directory.
type detachedKernel struct {
	*linked.Detached
	// stopWait, when set, ends the watch of the container's end (once it is released).
	stopWait context.CancelFunc
}

var (
	_ transports.Detachable = (*detachedKernel)(nil)
	_ transports.Reattacher = (*Transport)(nil)
)

func (t *Transport) startDetached(ctx context.Context, bc bundleCache, spec transports.Spec) (transports.Kernel, error) {
	if p := t.opts.Pool; p != nil {
		k, err := p.handOut(ctx, t, bc, spec)
		if k != nil || err != nil {
			return k, err
		}
	}
	c, err := t.prepareDetached(ctx, bc, spec, "")
	if err != nil {
		return nil, err
	}
	k, err := t.reachDetached(ctx, c, c.token+"\n")
	if err != nil {
		return nil, err
	}
	if t.opts.Pool != nil {
		k.SetPool(PoolMiss)
	}
	return k, nil
}

// detachedContainer is a detached run-mode kernel's container, made and started, whose
// kernel waits for its token (or, pooled, its start block) on the attached stdin.
type detachedContainer struct {
	id, kid, token string
	// runDir is the run directory on this host, inside where the container sees it.
	runDir, inside string
	att            client.ContainerAttachResult
	// early is what the kernel said on stderr before its kernel.log took over.
	early     *kernelstart.HeadBuffer
	exited    <-chan struct{}
	result    func() (transports.Exit, error)
	stopWait  context.CancelFunc
	jobOutDir string
	ctx       context.Context // the watch's: ends with stopWait
	// ns is a pooled kernel's container's mount namespace, held until its hand-out, and
	// hostname the container's host name (the engine's HOSTNAME entry of its environment).
	ns       *os.File
	hostname string
	tr       *Transport
}

// prepareDetached makes, attaches and starts the container of a detached kernel for
// spec, with its run directory; pool, when set, makes one for the Pool of that instance
// (no session yet: its kernel loads and then waits for a start block). On error nothing
// is left.
func (t *Transport) prepareDetached(ctx context.Context, bc bundleCache, spec transports.Spec, pool string) (_ *detachedContainer, err error) {
	image, err := t.Image()
	if err != nil {
		return nil, err
	}
	if _, err := kernelimage.Check(ctx, t.cli, image, bc.bundle); err != nil {
		return nil, err
	}
	uid, gid, err := numericUser(t.opts.UserFor(spec.Dir))
	if err != nil {
		return nil, err
	}
	c := &detachedContainer{tr: t}
	if c.kid, c.token, c.runDir, err = linked.NewRun(t.opts.RunDir, uid, gid, "Docker"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(c.runDir)
		}
	}()
	opts := t.createOptions(image, bc.bundle, spec)
	c.inside = path.Join(ContainerRunRoot, c.kid)
	opts.Config.Env = t.env(bc.bundle, spec, "", c.inside)
	opts.Config.AttachStdout = false // the kernel's stderr is read until its kernel.log takes over
	for k := range opts.Config.Labels {
		if strings.HasPrefix(k, LabelController) {
			delete(opts.Config.Labels, k) // no controller's: it outlives this one
		}
	}
	opts.Config.Labels[LabelDetached] = "1"
	if t.opts.DetachedOwner != "" {
		opts.Config.Labels[LabelDetachedOwner] = t.opts.DetachedOwner
	}
	if pool != "" {
		opts.Config.Env = append(opts.Config.Env, images.EnvPooled+"=1")
		opts.Config.Labels[LabelPool] = pool
		delete(opts.Config.Labels, LabelSession)
	}
	opts.HostConfig.AutoRemove = true
	opts.HostConfig.Mounts = append(opts.HostConfig.Mounts, mount.Mount{Type: mount.TypeBind, Source: c.runDir, Target: c.inside})
	c.jobOutDir = jobOutDirOf(opts.HostConfig)
	if c.id, c.att, err = t.launch(ctx, opts, client.ContainerAttachOptions{Stream: true, Stdin: true, Stderr: true}); err != nil {
		return nil, err
	}
	c.early = &kernelstart.HeadBuffer{Limit: 4096}
	go func() { _, _ = stdcopy.StdCopy(io.Discard, c.early, c.att.Reader) }()
	c.ctx, c.stopWait = context.WithCancel(context.Background())
	c.exited, c.result = t.waitContainer(c.ctx, c.id)
	if pool != "" {
		ins, ierr := t.cli.ContainerInspect(ctx, c.id, client.ContainerInspectOptions{})
		pid := 0
		if ierr == nil && ins.Container.State != nil {
			pid = ins.Container.State.Pid
		}
		if ierr == nil && ins.Container.Config != nil {
			c.hostname = ins.Container.Config.Hostname
		}
		// The namespace held is the container's: it still runs with that pid after the open.
		if c.ns, err = nsmount.Hold(pid, func() bool {
			ins, err := t.cli.ContainerInspect(ctx, c.id, client.ContainerInspectOptions{})
			return err == nil && ins.Container.State != nil && ins.Container.State.Running && ins.Container.State.Pid == pid
		}); err != nil {
			c.Discard(ctx)
			return nil, fmt.Errorf("container %.12s: %w", c.id, err)
		}
	}
	return c, nil
}

// Discard removes c's container and run directory, and returns once the container is gone
// (or 30 s have passed).
func (c *detachedContainer) Discard(ctx context.Context) {
	if c.ns != nil {
		_ = c.ns.Close()
	}
	c.att.Close()
	c.tr.removeSoon(ctx, c.id)
	// A removal the engine has under way already (AutoRemove, once the kernel ended at
	// its stdin's close) answers the force-remove with a conflict: wait for its end.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	_ = waitRemoved(wctx, c.tr.cli, c.id)
	cancel()
	c.stopWait()
	_ = os.RemoveAll(c.runDir)
}

// reachDetached hands c's kernel block on its stdin (the token line, or a pooled
// kernel's start block), closes it, and opens the kernel's link. On error c is removed.
func (t *Transport) reachDetached(ctx context.Context, c *detachedContainer, block string) (_ *detachedKernel, err error) {
	defer func() {
		if err != nil {
			c.Discard(ctx)
		}
	}()
	_, werr := io.WriteString(c.att.Conn, block)
	_ = c.att.CloseWrite()
	defer c.att.Close()
	if werr != nil {
		return nil, fmt.Errorf("hand the token to container %.12s: %w", c.id, werr)
	}
	cl, log, err := linked.Open(ctx, c.runDir, c.kid, c.token, limits.Positive(t.opts.KernelGrace, DefaultKernelGrace), c.exited)
	if err != nil {
		select {
		case <-c.exited:
			if exit, _ := c.result(); exit.Code == 126 || exit.Code == 127 { // the interpreter could not be run
				err = fmt.Errorf("%w: %w", transports.ErrUnavailable, err)
			}
		default:
		}
		return nil, fmt.Errorf("attach to detached kernel in container %.12s: %w (stderr %q, kernel.log %q)", c.id, err, c.early.String(), log)
	}
	h := cl.Hello()
	rec := transports.Record{Transport: Name, Kernel: c.kid, RunDir: c.runDir, Token: c.token, PID: h.PID, PGID: h.PGID, Leader: h.Leader, Where: c.id}
	k := t.runDetached(cl, rec, c.exited, c.result, c.stopWait)
	k.SetJobOutDir(c.jobOutDir)
	return k, nil
}

// waitContainer watches container id's end: exited is closed once the engine reports it
// not running (or ctx ends), and result then says how it ended.
func (t *Transport) waitContainer(ctx context.Context, id string) (exited <-chan struct{}, result func() (transports.Exit, error)) {
	done := make(chan struct{})
	var exit transports.Exit
	var waitErr error
	go func() {
		defer close(done)
		for {
			w := t.cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
			select {
			case r := <-w.Result:
				exit.Code = int(r.StatusCode)
				return
			case err := <-w.Error:
				// A wait that broke (the engine's stream cut, a loaded engine) is not the
				// container's end: only the engine saying it no longer runs is.
				if ctx.Err() == nil && !errors.Is(err, io.EOF) {
					ins, ierr := t.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
					if ierr == nil && ins.Container.State != nil && ins.Container.State.Running {
						select {
						case <-time.After(100 * time.Millisecond):
							continue
						case <-ctx.Done():
						}
					}
				}
				if !errors.Is(err, io.EOF) {
					waitErr = fmt.Errorf("wait container %.12s: %w", id, err)
				}
				return
			}
		}
	}()
	return done, func() (transports.Exit, error) {
		<-done
		return exit, waitErr
	}
}

// runDetached makes the kernel of a run-mode container (rec.Where) reached over cl; its
// end is the container's (exited, result); stopWait, when set, ends that watch once the
// kernel is released.
func (t *Transport) runDetached(cl *link.Client, rec transports.Record, exited <-chan struct{}, result func() (transports.Exit, error), stopWait context.CancelFunc) *detachedKernel {
	id, runDir := rec.Where, rec.RunDir
	k := &detachedKernel{Detached: linked.NewDetached(cl, transports.Info{Transport: Name, ID: id}, rec), stopWait: stopWait}
	k.Watch = transports.NewWatch(transports.WatchSpec{
		What: fmt.Sprintf("detached docker kernel %.12s", id),
		Steps: []transports.Step{
			{Act: func() { _ = k.Stdin().Close() }, Grace: transports.ResolveGrace(t.opts.StdinGrace)},
			t.stopStep(id),
			{Act: func() { t.removeSoon(context.Background(), id) }},
		},
		Reap: func(func() bool) (transports.Exit, error) {
			<-exited
			return result()
		},
		Release: func(_ transports.Exit, err error) error {
			cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if rerr := remove(ctx, t.cli, id); rerr != nil && err == nil {
				err = rerr
			}
			// The engine may be removing it already (AutoRemove): the end is its absence.
			if gerr := waitRemoved(ctx, t.cli, id); gerr != nil && err == nil {
				err = gerr
			}
			_ = os.RemoveAll(runDir)
			if k.stopWait != nil {
				k.stopWait()
			}
			return err
		},
	})
	return k
}

// Reattach reaches a detached kernel again from its record, as a controller started
// after the one that started it does; the record must be one of this transport's mode.
// In run mode rec.Where is the kernel's container (a detached kennel container, else
// errdefs.ErrInvalidArgument) and rec.RunDir its run directory on this host, a child of
// Options.RunDir: the controller dials its kernel.sock as Start's link does, and the
// kernel's end is the container's. In exec mode rec.Where is the container the kernel
// runs in and rec.RunDir its run directory there, a child of Options.RunDir: the kernel
// is reached through bridges, execs of python3 beside it.
//
// A kernel proven gone is an error matching errdefs.ErrNotFound: its container gone or
// stopped, no kernel at its socket (then its run directory and, in run mode, its
// container are removed), or a refused attach (a wrong token: nothing is touched). An
// engine out of reach is errdefs.ErrUnavailable. ctx bounds only the attach.
func (t *Transport) Reattach(ctx context.Context, rec transports.Record) (transports.Kernel, error) {
	if t.opts.Container != "" {
		if rec.Where == "" {
			return nil, fmt.Errorf("reattach docker kernel %q: an exec-mode record names its container: %w", rec.Kernel, cerrdefs.ErrInvalidArgument)
		}
		k, err := t.bridged(rec.Where, "python3").Reattach(ctx, rec)
		if err != nil {
			return nil, err
		}
		return k, nil
	}
	return t.reattachRun(ctx, rec)
}

// reattachRun is Reattach in run mode.
func (t *Transport) reattachRun(ctx context.Context, rec transports.Record) (transports.Kernel, error) {
	root := t.opts.RunDir
	if !linked.RunRecord(rec, Name, root) {
		return nil, fmt.Errorf("reattach docker kernel %q: not a record of this transport's (a container, a run directory under %q): %w", rec.Kernel, root, cerrdefs.ErrInvalidArgument)
	}
	ins, err := t.cli.ContainerInspect(ctx, rec.Where, client.ContainerInspectOptions{})
	gone := func(why error) (transports.Kernel, error) {
		if !cerrdefs.IsNotFound(err) {
			t.removeSoon(ctx, rec.Where)
		}
		_ = os.RemoveAll(rec.RunDir) // a kernel still there ends within a second
		return nil, fmt.Errorf("reattach docker kernel %s in container %.12s: %w", rec.Kernel, rec.Where, why)
	}
	switch {
	case cerrdefs.IsNotFound(err):
		return gone(fmt.Errorf("%w: the container is gone", link.ErrGone))
	case err != nil:
		return nil, fmt.Errorf("reattach docker kernel %s: inspect container %.12s: %w", rec.Kernel, rec.Where, classify(err))
	case ins.Container.Config == nil || ins.Container.Config.Labels[LabelKennel] != "1" || ins.Container.Config.Labels[LabelDetached] != "1":
		return nil, fmt.Errorf("reattach docker kernel %s: container %.12s is no detached kernel's: %w", rec.Kernel, rec.Where, cerrdefs.ErrInvalidArgument)
	case ins.Container.State == nil || !ins.Container.State.Running:
		return gone(fmt.Errorf("%w: the container has stopped", link.ErrGone))
	}
	wctx, stopWait := context.WithCancel(context.Background())
	exited, result := t.waitContainer(wctx, rec.Where)
	cl, isGone, err := linked.Reattach(ctx, &rec, limits.Positive(t.opts.KernelGrace, DefaultKernelGrace))
	if err != nil {
		stopWait()
		if isGone {
			return gone(err)
		}
		return nil, fmt.Errorf("reattach docker kernel %s in container %.12s: %w", rec.Kernel, rec.Where, err)
	}
	k := t.runDetached(cl, rec, exited, result, stopWait)
	k.SetJobOutDir(jobOutDirOf(ins.Container.HostConfig))
	return k, nil
}

// numericUser reads "uid:gid" (or "uid", the gid then the same).
func numericUser(user string) (int, int, error) {
	u, g, ok := strings.Cut(user, ":")
	if !ok {
		g = u
	}
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if err1 != nil || err2 != nil || uid < 0 || gid < 0 {
		return 0, 0, fmt.Errorf("%w: a detached Docker kernel needs a numeric user (uid:gid), not %q", transports.ErrUnavailable, user)
	}
	return uid, gid, nil
}
