package containerd

import (
	"context"
	"fmt"
	"io"
	"syscall"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"
	"github.com/containerd/typeurl/v2"

	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
)

// Kernel is a kernel running as a containerd task. It is single use and safe for concurrent
// use; see transports.Kernel.
type Kernel struct {
	info   transports.Info
	stdin  *kernelstart.Stdin
	stdout *kernelstart.CutReader
	watch  *transports.Watch

	stderrDone chan struct{} // closed when the stderr FIFO was read to its end

	// stopped is set when Kill's SIGTERM was issued before the task's end was seen (its
	// SIGKILL then looks like an OOM kill). A Live rung sets it, so it is final once the
	// reap has seen the end.
	stopped bool
}

var _ transports.Kernel = (*Kernel)(nil)

// sigkillCode is the exit status the shim reports for a task ended by SIGKILL: 128+9.
const sigkillCode = 128 + 9

// oomWait is how long the reap of a task that ended by SIGKILL, before Kill's stop stage,
// waits for the OOM event that may trail the exit.
const oomWait = 2 * time.Second

func newKernel(t *Transport, c client.Container, task client.Task, dio *cio.DirectIO, spec transports.Spec, exitc <-chan client.ExitStatus, oom *oomWatch, evcancel context.CancelFunc) *Kernel {
	stderr := spec.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	k := &Kernel{
		info:       transports.Info{Transport: Name, ID: c.ID()},
		stdin:      kernelstart.NewStdin(dio.Stdin, func() error { return closeStdin(dio.Stdin, task) }),
		stdout:     kernelstart.NewCutReader(dio.Stdout, func() { _ = dio.Stdout.Close() }),
		stderrDone: make(chan struct{}),
	}
	go func() {
		defer close(k.stderrDone)
		_, _ = io.Copy(stderr, dio.Stderr) // the one reader of the stderr FIFO
	}()
	stop := transports.ResolveGrace(t.opts.StopGrace)
	k.watch = transports.NewWatch(transports.WatchSpec{
		What: fmt.Sprintf("containerd kernel %s", c.ID()),
		Steps: []transports.Step{
			{Act: func() { _ = k.stdin.Close() }, Grace: transports.ResolveGrace(t.opts.StdinGrace)},
			{Act: func() { k.stopped = true; signal(task, syscall.SIGTERM, false) }, Live: true, Grace: stop},
			{Act: func() { signal(task, syscall.SIGKILL, true) }, Grace: 2 * time.Second},
			// Still not seen to end: a shim that cannot write the output nobody reads.
			{Act: func() { k.stdout.Cut() }},
		},
		Reap: func(seen func() bool) (transports.Exit, error) {
			st := <-exitc
			seen()
			exit := transports.Exit{Code: int(st.ExitCode())}
			var err error
			if werr := st.Error(); werr != nil {
				err = fmt.Errorf("wait task %s: %w", c.ID(), werr)
			}
			if exit.Code == sigkillCode && !k.stopped {
				exit.OOM = oom.wait(oomWait)
			}
			return exit, err
		},
		Release: func(_ transports.Exit, err error) error {
			k.drain(2 * time.Second)
			evcancel()
			ctx, cancel := context.WithTimeout(nsCtx(context.Background()), 30*time.Second)
			defer cancel()
			// A failed delete here (a shim closing as its task ended) is retried by remove,
			// which reports what is left.
			_, _ = task.Delete(ctx)
			_ = dio.Close() // our FIFO ends, and their directory
			if rerr := remove(ctx, t.cli, c.ID(), t.opts.FIFODir); rerr != nil && err == nil {
				err = rerr
			}
			return err
		},
	})
	return k
}

// signal sends sig to task's process, or with all to every process of its container, and
// does not wait for the shim's answer past 10 s.
func signal(task client.Task, sig syscall.Signal, all bool) {
	ctx, cancel := context.WithTimeout(nsCtx(context.Background()), 10*time.Second)
	defer cancel()
	var opts []client.KillOpts
	if all {
		opts = append(opts, client.WithKillAll)
	}
	_ = task.Kill(ctx, sig, opts...)
}

// Stdin is the kernel's standard input, the stdin FIFO. Close ends it: our write end
// closes and the shim is told to close its own (CloseIO), so the kernel reads EOF (the
// stub then shuts down).
func (k *Kernel) Stdin() io.WriteCloser { return k.stdin }

// Stdout is the kernel's standard output, the stdout FIFO read directly (the caller is its
// one reader). What the kernel still wrote when it has ended and nobody read within 2 s is
// dropped, as it is when Kill's last stage comes, and Stdout ends with EOF: an unread
// Stdout never keeps Kill or Wait from returning.
func (k *Kernel) Stdout() io.Reader { return k.stdout }

// Info says Transport "containerd", no host pids, and ID the container id.
func (k *Kernel) Info() transports.Info { return k.info }

// Wait blocks until the task has exited and its task, container, snapshot and FIFOs are
// deleted. Code is the task's exit status as the shim reports it (128+N after signal N).
// Exit.OOM reports that the memory limit ended the kernel itself: the container's cgroup
// had an OOM kill (its /tasks/oom event) and the task ended by SIGKILL (137) before Kill's
// SIGTERM stage; a child killed by the limit while the kernel lives on does not make its
// later end an OOM, nor does Kill's SIGKILL. Exit.Killed reports that Kill ran before the
// end. Later calls return the same.
func (k *Kernel) Wait() (transports.Exit, error) { return k.watch.Wait() }

// Ended is closed once the kernel's end is known, before its release (transports.Ender).
func (k *Kernel) Ended() <-chan struct{} { return k.watch.Ended() }

// Exit returns how the kernel ended, once Ended is closed (transports.Ender).
func (k *Kernel) Exit() transports.Exit { return k.watch.Exit() }

// Kill ends the kernel in stages: close stdin and wait Options.StdinGrace for the stub to
// exit; SIGTERM the task and wait Options.StopGrace; SIGKILL every process of the
// container; last, 2 s on, cut Stdout (a shim blocked on output nobody reads). Then the
// task, container and snapshot are deleted. It returns once the end is confirmed (Wait's
// result is set). The stages run once, whoever calls Kill and however often; if ctx ends
// first, Kill returns ctx's cause and the stages go on.
func (k *Kernel) Kill(ctx context.Context) error { return k.watch.Kill(ctx) }

// drain waits up to d for Stdout to be read to its end, then cuts it; then waits up to d for
// stderr's end and closes its FIFO.
func (k *Kernel) drain(d time.Duration) {
	k.stdout.Drain(d)
	select {
	case <-k.stderrDone:
	case <-time.After(d):
	}
}

// closeStdin closes our write end of the stdin FIFO, then has the shim close its own
// (CloseIO with WithStdinCloser): only then does the kernel read EOF.
func closeStdin(w io.Closer, task client.Task) error {
	werr := w.Close()
	ctx, cancel := context.WithTimeout(nsCtx(context.Background()), 10*time.Second)
	defer cancel()
	if err := task.CloseIO(ctx, client.WithStdinCloser); err != nil && !errdefs.IsNotFound(err) && !errdefs.IsFailedPrecondition(err) {
		return fmt.Errorf("close kernel stdin: %w", err)
	}
	return werr
}

// oomWatch records whether the container had an OOM event.
type oomWatch struct {
	seen chan struct{} // closed at the first OOM event
}

// watchOOM subscribes to /tasks/oom events of container id until ctx ends.
func watchOOM(ctx context.Context, cli *client.Client, id string) *oomWatch {
	w := &oomWatch{seen: make(chan struct{})}
	evs, errs := cli.Subscribe(ctx, `topic=="/tasks/oom"`)
	go func() {
		for {
			select {
			case e := <-evs:
				if e == nil || e.Event == nil {
					continue
				}
				v, err := typeurl.UnmarshalAny(e.Event)
				if err != nil {
					continue
				}
				if ev, ok := v.(*apievents.TaskOOM); ok && ev.ContainerID == id {
					close(w.seen)
					<-ctx.Done()
					return
				}
			case <-errs:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return w
}

// wait reports whether an OOM event came, waiting up to d for one.
func (w *oomWatch) wait(d time.Duration) bool {
	select {
	case <-w.seen:
		return true
	case <-time.After(d):
		return false
	}
}
