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
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kennel-dev/kennel/transports"
)

// Kernel is a wrapped kernel: the wrapper process on the host and, behind it, the stub in
// the sandbox. It implements transports.Kernel.
//
// The controller sees only the wrapper: its pid, its process group, its exit. What runs
// in the sandbox (the stub, its cells' processes, its jobs) is ended by the stub itself
// when its stdin closes (see Kill), not by the host.
type Kernel struct {
	cmd        *exec.Cmd
	pid        int
	stdin      *gatedWriter
	stdout     *pipeReader
	stderr     *pipeReader // nil when Spec.Stderr was nil
	info       transports.Info
	stdinGrace time.Duration
	termGrace  time.Duration
	drainGrace time.Duration

	killCalled atomic.Bool
	ladder     *transports.Ladder

	mu     sync.Mutex // guards exited against signals to the group
	exited bool       // the wrapper is a zombie or reaped: its group id may be reused

	exitSeen chan struct{} // closed once the wrapper has exited (not yet released)
	finished chan struct{} // closed once exit and err are set and the pipes released
	exit     transports.Exit
	err      error
}

func newKernel(cmd *exec.Cmd, stdin, stdout, stderr *os.File, stderrTo io.Writer, preamble []byte, opts Options) *Kernel {
	pid := cmd.Process.Pid
	k := &Kernel{
		cmd:        cmd,
		pid:        pid,
		stdin:      newGatedWriter(stdin, preamble),
		stdout:     &pipeReader{f: stdout},
		info:       transports.Info{Transport: Name, ID: strconv.Itoa(pid)},
		stdinGrace: transports.ResolveGrace(opts.StdinGrace),
		termGrace:  transports.ResolveGrace(opts.TermGrace),
		drainGrace: transports.ResolveGrace(opts.DrainGrace),
		exitSeen:   make(chan struct{}),
		finished:   make(chan struct{}),
	}
	k.newLadder()
	var copied chan struct{}
	if stderr != nil {
		k.stderr = &pipeReader{f: stderr}
		copied = make(chan struct{})
		go func() {
			defer close(copied)
			_, _ = io.Copy(stderrTo, k.stderr)
			// A writer that failed stops the copy; keep draining so the sandbox never
			// blocks on a full stderr pipe.
			_, _ = io.Copy(io.Discard, k.stderr)
		}()
	}
	go k.watch(copied)
	return k
}

// watch waits for the wrapper's exit, then releases the pipes and records the end.
func (k *Kernel) watch(stderrCopied chan struct{}) {
	// See the exit without reaping the wrapper, so that a signal to its process group
	// sent under k.mu before this point cannot reach a group that reuses its id.
	var si unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, k.pid, &si, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			break
		}
	}
	killed := k.killCalled.Load()
	k.mu.Lock()
	k.exited = true
	k.mu.Unlock()
	werr := k.cmd.Wait()
	close(k.exitSeen)
	k.exit = exitOf(k.cmd.ProcessState, killed)
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		k.err = fmt.Errorf("wrapped kernel %d: %w", k.pid, werr)
	}
	k.stdin.Close() // nobody reads it any more; a blocked Write returns

	// What still holds stdout or stderr is in the sandbox, out of reach: give it
	// DrainGrace, then end both for the reader (the bytes already in the pipe are still
	// read first). The timer is never stopped: it also ends stdout, whoever reads it.
	time.AfterFunc(k.drainGrace, func() {
		k.stdout.cut()
		if k.stderr != nil {
			k.stderr.cut()
		}
	})
	if stderrCopied != nil {
		<-stderrCopied
	}
	close(k.finished)
}

func exitOf(ps *os.ProcessState, killed bool) transports.Exit {
	e := transports.Exit{Code: ps.ExitCode(), Killed: killed}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		e.Code, e.Signal = -1, int(ws.Signal())
	}
	return e
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
func (k *Kernel) Kill(ctx context.Context) error {
	k.killCalled.Store(true)
	return k.ladder.Kill(ctx, fmt.Sprintf("wrapped kernel %d", k.pid))
}

// newLadder sets up the kill stages of Kill: stdin EOF, TERM and KILL to the wrapper's
// group; climbing stops once the wrapper exited, Kill returns once it is released.
func (k *Kernel) newLadder() {
	k.ladder = &transports.Ladder{Ended: k.exitSeen, Finished: k.finished, Steps: []transports.Step{
		{Act: func() { _ = k.stdin.Close() }, Grace: k.stdinGrace},
		{Act: func() { k.signalGroup(syscall.SIGTERM) }, Grace: k.termGrace},
		{Act: func() { k.signalGroup(syscall.SIGKILL) }},
	}}
}

// signalGroup signals the wrapper's process group unless the wrapper has exited.
func (k *Kernel) signalGroup(sig syscall.Signal) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.exited {
		_ = syscall.Kill(-k.pid, sig)
	}
}

// Wait blocks until the wrapper has exited and been reaped and the kernel's stderr has
// ended (at most DrainGrace later), and reports how the wrapper ended: its exit code, or
// the signal that ended it. A wrapper's code stands for the kernel's as far as the
// wrapper passes it on (setsid -w, docker exec, ssh and bwrap do). Exit.Killed reports
// that Kill was called before the end was seen.
func (k *Kernel) Wait() (transports.Exit, error) {
	<-k.finished
	return k.exit, k.err
}

// gatedWriter is the kernel's stdin: a goroutine writes the preamble first, and every
// Write waits for it.
type gatedWriter struct {
	f         *os.File
	ready     chan struct{}
	err       error // the preamble's write error; set before ready closes
	closeOnce sync.Once
	closeErr  error
}

func newGatedWriter(f *os.File, preamble []byte) *gatedWriter {
	w := &gatedWriter{f: f, ready: make(chan struct{})}
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
func (w *gatedWriter) Close() error {
	w.closeOnce.Do(func() { w.closeErr = w.f.Close() })
	return w.closeErr
}

// pipeReader reads a pipe until EOF, or, once cut, until the pipe holds no more bytes;
// it closes the pipe at its first error (EOF included) and returns that error from then
// on. One goroutine reads at a time; cut may be called from any goroutine.
type pipeReader struct {
	f      *os.File
	err    error
	isCut  atomic.Bool
	closed atomic.Bool
}

func (r *pipeReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if !r.isCut.Load() {
		n, err := r.f.Read(p)
		if err == nil || !r.isCut.Load() || !errors.Is(err, os.ErrDeadlineExceeded) {
			return r.result(n, err)
		}
	}
	return r.result(r.readNow(p))
}

// readNow reads what the pipe holds without waiting: io.EOF when it holds nothing.
func (r *pipeReader) readNow(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	rc, err := r.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	// cut sets a read deadline once, to wake a blocked Read; clear it (again, if cut
	// set it after the first clear) so the raw read runs.
	for range 3 {
		_ = r.f.SetReadDeadline(time.Time{})
		var n int
		var rerr error
		err = rc.Read(func(fd uintptr) bool {
			n, rerr = unix.Read(int(fd), p)
			return true
		})
		if errors.Is(err, os.ErrDeadlineExceeded) || (err == nil && rerr == unix.EINTR) {
			continue
		}
		switch {
		case err != nil:
			return 0, err
		case rerr == unix.EAGAIN, rerr == nil && n <= 0:
			return 0, io.EOF
		case rerr != nil:
			return 0, rerr
		}
		return n, nil
	}
	return 0, io.EOF
}

func (r *pipeReader) result(n int, err error) (int, error) {
	if err != nil {
		r.err = err
		r.closed.Store(true)
		r.f.Close()
	}
	return n, err
}

// cut makes the reader end with EOF as soon as the pipe holds no more bytes, waking a
// Read that waits.
func (r *pipeReader) cut() {
	r.isCut.Store(true)
	if !r.closed.Load() {
		_ = r.f.SetReadDeadline(time.Now())
	}
}
