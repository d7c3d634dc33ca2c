package containerd

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/kennel-dev/kennel/link"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
	"github.com/kennel-dev/kennel/transports/internal/limits"
	"github.com/kennel-dev/kennel/transports/internal/linked"
)

// ContainerRunRoot is where a detached kernel's run directory is mounted in its
// container: ContainerRunRoot/<kernel id>.
const ContainerRunRoot = "/run/kennel"

// LabelDetached marks the container (and snapshot) of a detached kernel: it outlives its
// controller, so the owner rule of Sweep does not take it; Sweep removes it once its task
// no longer runs.
const LabelDetached = "dev.kennel.detached"

// DefaultKernelGrace is how long a detached kernel lives with nothing attached when
// Options.KernelGrace is zero.
const DefaultKernelGrace = time.Hour

// detachedKernel is a kernel task reached over kernel.sock in its bind-mounted run
// directory; its end is its task's.
type detachedKernel struct{ *linked.Detached }

var (
	_ transports.Detachable = (*detachedKernel)(nil)
	_ transports.Reattacher = (*Transport)(nil)
)

// runMount is the OCI spec option binding runDir at its place in the container.
func runMount(runDir, inside string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		s.Mounts = append(s.Mounts, specs.Mount{Destination: inside, Type: "bind", Source: runDir, Options: []string{"rbind", "rprivate", "nosuid", "nodev"}})
		return nil
	}
}

// nullStdout is a task IO whose stdout the shim opens as /dev/null (a path that is no
// FIFO is a file to the shim): a detached kernel writes nothing there, and no reader of
// ours must outlive the controller for it.
type nullStdout struct{ *cio.DirectIO }

// Config is the DirectIO's with Stdout /dev/null.
func (n nullStdout) Config() cio.Config {
	c := n.DirectIO.Config()
	c.Stdout = os.DevNull
	return c
}

// attach hands the started task of a detached kernel block on its stdin (the token
// line, or a pooled kernel's start block), closes it, attaches the kernel's link and makes
// the kernel. On error the task, its container and run directory are removed.
func (st *started) attach(ctx context.Context, block string) (_ *detachedKernel, err error) {
	t, c := st.t, st.c
	defer func() {
		if err != nil {
			st.Discard(ctx)
		}
	}()
	_, werr := io.WriteString(st.dio.Stdin, block)
	_ = closeStdin(st.dio.Stdin, st.task)
	if werr != nil {
		return nil, fmt.Errorf("hand the token to task %s: %w", c.ID(), werr)
	}
	early := &kernelstart.HeadBuffer{Limit: 4096}
	go func() { _, _ = io.Copy(early, st.dio.Stderr) }()
	grace := limits.Positive(t.opts.KernelGrace, DefaultKernelGrace)
	cl, log, err := linked.Open(ctx, st.runDir, st.kid, st.token, grace, st.exited)
	if err != nil {
		return nil, fmt.Errorf("attach to detached kernel in task %s: %w (stderr %q, kernel.log %q)", c.ID(), err, early.String(), log)
	}
	_ = st.dio.Close() // its FIFOs: the kernel's stdio is its kernel.log now
	h := cl.Hello()
	rec := transports.Record{Transport: Name, Kernel: st.kid, RunDir: st.runDir, Token: st.token, PID: h.PID, PGID: h.PGID, Leader: h.Leader, Grace: grace, Where: c.ID()}
	return t.runDetached(cl, rec, st.task, st.exited, st.result, st.oom, st.evcancel), nil
}

// Discard removes the task, its container and snapshot, its FIFOs and run directory.
func (st *started) Discard(ctx context.Context) {
	if st.ns != nil {
		_ = st.ns.Close()
	}
	st.evcancel()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = remove(rctx, st.t.cli, st.c.ID(), st.t.opts.FIFODir)
	st.dio.Cancel()
	_ = st.dio.Close()
	if st.runDir != "" {
		_ = os.RemoveAll(st.runDir)
	}
}

// taskEnd turns a task's exit channel into a closed-at-the-end channel and its result.
func taskEnd(exitc <-chan client.ExitStatus) (<-chan struct{}, func() (transports.Exit, error)) {
	done := make(chan struct{})
	var st client.ExitStatus
	go func() {
		defer close(done)
		st = <-exitc
	}()
	return done, func() (transports.Exit, error) {
		<-done
		exit := transports.Exit{Code: int(st.ExitCode())}
		if err := st.Error(); err != nil {
			return exit, fmt.Errorf("wait task: %w", err)
		}
		return exit, nil
	}
}

// runDetached makes the kernel of task (rec.Where) reached over cl; its end is the task's.
func (t *Transport) runDetached(cl *link.Client, rec transports.Record, task client.Task, exited <-chan struct{}, result func() (transports.Exit, error), oom *oomWatch, evcancel context.CancelFunc) *detachedKernel {
	id, runDir := rec.Where, rec.RunDir
	k := &detachedKernel{linked.NewDetached(cl, transports.Info{Transport: Name, ID: id}, rec)}
	stopped := false
	k.Watch = transports.NewWatch(transports.WatchSpec{
		What: "detached containerd kernel " + id,
		Steps: []transports.Step{
			{Act: func() { _ = k.Stdin().Close() }, Grace: transports.ResolveGrace(t.opts.StdinGrace)},
			{Act: func() { stopped = true; signal(task, syscall.SIGTERM, false) }, Live: true, Grace: transports.ResolveGrace(t.opts.StopGrace)},
			{Act: func() { signal(task, syscall.SIGKILL, true) }},
		},
		Reap: func(seen func() bool) (transports.Exit, error) {
			<-exited
			seen()
			exit, err := result()
			if exit.Code == sigkillCode && !stopped {
				exit.OOM = oom.wait(oomWait)
			}
			return exit, err
		},
		Release: func(_ transports.Exit, err error) error {
			cl.Close()
			evcancel()
			ctx, cancel := context.WithTimeout(nsCtx(context.Background()), 30*time.Second)
			defer cancel()
			if rerr := remove(ctx, t.cli, id, t.opts.FIFODir); rerr != nil && err == nil {
				err = rerr
			}
			_ = os.RemoveAll(runDir)
			return err
		},
	})
	return k
}

// Reattach reaches a detached kernel again from its record, as a controller started
// after the one that started it does: rec.Where is the kernel's container (a detached
// kennel container, else errdefs.ErrInvalidArgument) and rec.RunDir its run directory on
// this host, a child of Options.RunDir. The controller dials its kernel.sock as Start's
// link does; the kernel's end is its task's.
//
// A kernel proven gone is an error matching errdefs.ErrNotFound: its container or task
// gone or stopped, or no kernel at its socket (then its container and run directory are
// removed), or a refused attach (a wrong token: nothing is touched). A daemon out of reach
// is errdefs.ErrUnavailable. ctx bounds only the attach.
func (t *Transport) Reattach(ctx context.Context, rec transports.Record) (transports.Kernel, error) {
	root := t.opts.RunDir
	if !linked.RunRecord(rec, Name, root) {
		return nil, fmt.Errorf("reattach containerd kernel %q: not a record of this transport's (a container, a run directory under %q): %w", rec.Kernel, root, errdefs.ErrInvalidArgument)
	}
	nctx := nsCtx(ctx)
	gone := func(why error) (transports.Kernel, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(nctx), 30*time.Second)
		defer cancel()
		_ = remove(rctx, t.cli, rec.Where, t.opts.FIFODir)
		_ = os.RemoveAll(rec.RunDir) // a kernel still there ends within a second
		return nil, fmt.Errorf("reattach containerd kernel %s in container %s: %w", rec.Kernel, rec.Where, why)
	}
	c, err := t.cli.LoadContainer(nctx, rec.Where)
	switch {
	case errdefs.IsNotFound(err):
		return gone(fmt.Errorf("%w: the container is gone", link.ErrGone))
	case err != nil:
		return nil, fmt.Errorf("reattach containerd kernel %s: load container %s: %w", rec.Kernel, rec.Where, classify(err))
	}
	labels, err := c.Labels(nctx)
	if err != nil {
		return nil, fmt.Errorf("reattach containerd kernel %s: labels of %s: %w", rec.Kernel, rec.Where, classify(err))
	}
	if labels[LabelKennel] != "1" || labels[LabelDetached] != "1" {
		return nil, fmt.Errorf("reattach containerd kernel %s: container %s is no detached kernel's: %w", rec.Kernel, rec.Where, errdefs.ErrInvalidArgument)
	}
	task, err := c.Task(nctx, nil)
	switch {
	case errdefs.IsNotFound(err):
		return gone(fmt.Errorf("%w: the container has no task", link.ErrGone))
	case err != nil:
		return nil, fmt.Errorf("reattach containerd kernel %s: load task %s: %w", rec.Kernel, rec.Where, classify(err))
	}
	st, err := task.Status(nctx)
	if err != nil {
		return nil, fmt.Errorf("reattach containerd kernel %s: task status %s: %w", rec.Kernel, rec.Where, classify(err))
	}
	if st.Status != client.Running {
		return gone(fmt.Errorf("%w: the task is %s", link.ErrGone, st.Status))
	}
	evctx, evcancel := context.WithCancel(nsCtx(context.Background()))
	oom := watchOOM(evctx, t.cli, rec.Where)
	exitc, err := task.Wait(nsCtx(context.Background()))
	if err != nil {
		evcancel()
		return nil, fmt.Errorf("reattach containerd kernel %s: wait task: %w", rec.Kernel, classify(err))
	}
	exited, result := taskEnd(exitc)
	rec.Grace = limits.Positive(t.opts.KernelGrace, DefaultKernelGrace)
	cl, isGone, err := linked.Reattach(ctx, &rec, rec.Grace)
	if err != nil {
		evcancel()
		if isGone {
			return gone(err)
		}
		return nil, fmt.Errorf("reattach containerd kernel %s in container %s: %w", rec.Kernel, rec.Where, err)
	}
	return t.runDetached(cl, rec, task, exited, result, oom, evcancel), nil
}

// insideRun is a kernel's run directory as its container sees it.
func insideRun(kid string) string { return path.Join(ContainerRunRoot, kid) }
