package wrapped

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
)

// Kernel is a wrapped kernel: the wrapper process on the host and, behind it, the stub in
// the sandbox. It implements transports.Kernel.
//
// The controller sees only the wrapper: its pid, its process group, its exit. What runs
// in the sandbox (the stub, its cells' processes, its jobs) is ended by the stub itself
// when its stdin closes (see Kill), not by the host.
type Kernel struct {
	pid    int
	stdin  *gatedWriter
	stdout *kernelstart.PipeReader
	stderr *kernelstart.PipeReader // nil when Spec.Stderr was nil
	info   transports.Info
	watch  *transports.Watch
}

func newKernel(cmd *exec.Cmd, p pipes, stderrTo io.Writer, preamble []byte, opts Options) *Kernel {
	pid := cmd.Process.Pid
	k := &Kernel{
		pid:    pid,
		stdin:  newGatedWriter(p.stdin, preamble),
		stdout: kernelstart.NewPipeReader(p.stdout),
		info:   transports.Info{Transport: Name, ID: strconv.Itoa(pid)},
	}
	var copied chan struct{}
	if p.stderr != nil {
		k.stderr = kernelstart.NewPipeReader(p.stderr)
		copied = make(chan struct{})
		go func() {
			defer close(copied)
			_, _ = io.Copy(stderrTo, k.stderr)
			// A writer that failed stops the copy; keep draining so the sandbox never
			// blocks on a full stderr pipe.
			_, _ = io.Copy(io.Discard, k.stderr)
		}()
	}
	drainGrace := transports.ResolveGrace(opts.DrainGrace)
	k.watch = transports.NewWatch(transports.WatchSpec{
		What: fmt.Sprintf("wrapped kernel %d", pid),
		Steps: []transports.Step{
			{Act: func() { _ = k.stdin.Close() }, Grace: transports.ResolveGrace(opts.StdinGrace)},
			// Live: never once the wrapper is a zombie or reaped (its group id is free).
			{Act: func() { _ = syscall.Kill(-pid, syscall.SIGTERM) }, Grace: transports.ResolveGrace(opts.TermGrace), Live: true},
			{Act: func() { _ = syscall.Kill(-pid, syscall.SIGKILL) }, Live: true},
		},
		Reap: func(seen func() bool) (transports.Exit, error) { return k.reap(cmd, seen) },
		Release: func(_ transports.Exit, err error) error {
			// What still holds stdout or stderr is in the sandbox, out of reach: give it
			// DrainGrace, then end both for the reader (the bytes already in the pipe are
			// still read first). The timer is never stopped: it also ends stdout, whoever
			// reads it.
			time.AfterFunc(drainGrace, func() {
				k.stdout.Cut()
				if k.stderr != nil {
					k.stderr.Cut()
				}
			})
			if copied != nil {
				<-copied
			}
			return err
		},
	})
	return k
}

// reap waits for the wrapper's exit and reaps it.
func (k *Kernel) reap(cmd *exec.Cmd, seen func() bool) (transports.Exit, error) {
	// See the exit without reaping the wrapper, so that a signal to its process group
	// (a Live rung, held off by seen) cannot reach a group that reuses its id.
	seeExit(k.pid)
	seen()
	werr := cmd.Wait()
	k.stdin.Close() // nobody reads it any more; a blocked Write returns
	e := transports.Exit{Code: cmd.ProcessState.ExitCode()}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		e.Code, e.Signal = -1, int(ws.Signal())
	}
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		return e, fmt.Errorf("wrapped kernel %d: %w", k.pid, werr)
	}
	return e, nil
}

// Stdin is the kernel's standard input. Writes wait until the start block (and the
// bundle) went out first; closing it asks the kernel to end.
func (k *Kernel) Stdin() io.WriteCloser { return k.stdin }

// Stdout is the kernel's standard output. It reaches EOF when every holder of it is gone,
// or DrainGrace after the wrapper exited, once the bytes already written are read. It
// releases its descriptor at EOF (or at the first error).
func (k *Kernel) Stdout() io.Reader { return k.stdout }

// Info reports the transport, no host pid (the kernel's pids are the sandbox's, and
// Info.PID is 0), and the wrapper's host pid as ID in decimal.
func (k *Kernel) Info() transports.Info { return k.info }

// WrapperPID returns the host pid of the wrapper process, the leader of the process
// group Kill signals.
func (k *Kernel) WrapperPID() int { return k.pid }

// Kill ends the kernel in stages: close its stdin and wait StdinGrace (the stub ends its
// jobs and exits at EOF, and the wrapper with it); signal SIGTERM to the wrapper's
// process group and wait TermGrace; signal SIGKILL to it. The wrapper's exit is the only
// confirmation Kill takes. A signal never reaches a group whose leader has been reaped.
//
// The stages run once, whoever calls Kill and however often; if ctx ends first, Kill
// returns ctx's cause and the stages go on. Once the wrapper has exited, what the
// sandbox still runs is the stub's to end: the host cannot name its processes.
func (k *Kernel) Kill(ctx context.Context) error { return k.watch.Kill(ctx) }

// Wait blocks until the wrapper has exited and been reaped and the kernel's stderr has
// ended (at most DrainGrace later), and reports how the wrapper ended: its exit code, or
// the signal that ended it. A wrapper's code stands for the kernel's as far as the
// wrapper passes it on (setsid -w, docker exec, ssh and bwrap do). Exit.Killed reports
// that Kill was called before the end was seen.
func (k *Kernel) Wait() (transports.Exit, error) { return k.watch.Wait() }

// gatedWriter is the kernel's stdin: a goroutine writes the preamble first, and every
// Write waits for it.
type gatedWriter struct {
	f     *os.File
	ready chan struct{}
	err   error        // the preamble's write error; set before ready closes
	close func() error // f.Close, once
}

func newGatedWriter(f *os.File, preamble []byte) *gatedWriter {
	w := &gatedWriter{f: f, ready: make(chan struct{}), close: sync.OnceValue(f.Close)}
	go func() {
		defer close(w.ready)
		if _, err := f.Write(preamble); err != nil {
			w.err = fmt.Errorf("send start block to wrapped kernel: %w", err)
		}
	}()
	return w
}

// Write writes p after the preamble. It fails with the preamble's error if that failed.
func (w *gatedWriter) Write(p []byte) (int, error) {
	<-w.ready
	if w.err != nil {
		return 0, w.err
	}
	return w.f.Write(p)
}

// Close closes the pipe (a preamble still being written stops); later calls return the
// first call's result.
func (w *gatedWriter) Close() error { return w.close() }
