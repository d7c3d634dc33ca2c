package reaper

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// ErrHandshake reports that the reaper process ended or misbehaved before it said whether
// the kernel started. The usual cause is an executable that does not call Main first.
var ErrHandshake = errors.New("reaper handshake failed")

// ErrLost reports that the reaper ended without reporting the kernel's status (it was
// killed from outside); the kernel's descendants may have survived it.
var ErrLost = errors.New("reaper lost")

// DefaultGrace is the reaper's grace between forwarding SIGTERM and killing hard when the
// Spec names none.
const DefaultGrace = 2 * time.Second

// stopGrace is how long a launcher waits for a reaper it told to kill hard before it
// SIGKILLs the reaper itself.
const stopGrace = 5 * time.Second

// Spec says which kernel a reaper runs.
type Spec struct {
	// Path is the executable to run in reaper mode; it must call Main first in main.
	// Empty means "/proc/self/exe", the running binary (even if its file was replaced).
	Path string
	// Argv is the kernel's argv; Argv[0] is the path executed (no PATH lookup). Required.
	Argv []string
	// Env is the kernel's whole environment ("KEY=VALUE"). Start adds the reaper's marker,
	// which the reaper removes again before it starts the kernel.
	Env []string
	// Dir is the working directory of the reaper and the kernel; empty means the caller's.
	Dir string
	// Stdin and Stdout are the kernel's standard input and output, handed to the kernel as
	// they are. Required. Start does not close them.
	Stdin, Stdout *os.File
	// Stderr receives the kernel's and the reaper's stderr. An *os.File is handed over as
	// it is; any other writer is fed by a copying goroutine; nil discards.
	Stderr io.Writer
	// Grace is how long the reaper waits after it forwarded SIGTERM before it kills hard,
	// also when the controller died. Zero means DefaultGrace; negative means no wait.
	Grace time.Duration
}

// Process is a running reaper and its kernel. Its methods are safe for concurrent use.
type Process struct {
	cmd       *exec.Cmd
	kernelPID int
	status    *bufio.Reader
	statusR   *os.File

	hs     chan struct{} // closed once Start is done with the handshake
	done   chan struct{}
	result Status
	err    error

	stopOnce sync.Once
}

// Start starts a reaper running the kernel of s and returns once the kernel has started,
// with its pid known, or has failed to. ctx bounds only the start: a cancelled ctx after
// Start returned does not end the kernel.
//
// On error nothing is left running: a reaper that did not report a started kernel is
// stopped and reaped before Start returns. An exec failure of the kernel comes back with
// its errno (errors.Is(err, fs.ErrNotExist) for a missing interpreter).
//
// The reaper is started and reaped on one locked OS thread, so its parent-death signal
// fires when the controller dies, not when a Go runtime thread happens to exit.
func Start(ctx context.Context, s Spec) (*Process, error) {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return nil, fmt.Errorf("start reaper: no kernel command: %w", ErrConfig)
	}
	if s.Stdin == nil || s.Stdout == nil {
		return nil, fmt.Errorf("start reaper %s: stdin and stdout are required: %w", s.Argv[0], ErrConfig)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start reaper %s: %w", s.Argv[0], context.Cause(ctx))
	}
	path := cmp.Or(s.Path, "/proc/self/exe")
	grace := min(max(cmp.Or(s.Grace, DefaultGrace), 0), maxGrace)
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start reaper %s: %w", s.Argv[0], err)
	}
	cfg := config{parent: os.Getpid(), grace: grace}
	env := append(withoutMarker(s.Env), envMarker+"="+cfg.encode())
	cmd := &exec.Cmd{
		Path:       path,
		Args:       append([]string{"kennel-reaper", argGuard}, s.Argv...),
		Env:        env,
		Dir:        s.Dir,
		Stdin:      s.Stdin,
		Stdout:     s.Stdout,
		Stderr:     s.Stderr,
		ExtraFiles: []*os.File{statusW},
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:   true,
			Pdeathsig: syscall.SIGTERM,
		},
		WaitDelay: time.Second,
	}
	p := &Process{
		cmd:     cmd,
		status:  bufio.NewReaderSize(statusR, maxLine),
		statusR: statusR,
		hs:      make(chan struct{}),
		done:    make(chan struct{}),
	}
	started := make(chan error, 1)
	go p.own(started)
	err = <-started
	statusW.Close()
	if err != nil {
		statusR.Close()
		return nil, fmt.Errorf("start reaper %s: %w", s.Argv[0], err)
	}
	err = p.handshake(ctx)
	close(p.hs)
	if err != nil {
		p.stop()
		<-p.done
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("reaper %s ended with no word (does the executable call reaper.Main first?): %w",
				p.exitDesc(), ErrHandshake)
		}
		return nil, fmt.Errorf("start kernel %s: %w", s.Argv[0], err)
	}
	return p, nil
}

// own starts the reaper and reaps it on one locked OS thread. The thread that forks a
// process is its parent for PR_SET_PDEATHSIG: if that thread exited (the Go runtime ends a
// thread whose locked goroutine returns), the reaper would take it for the controller's
// death. Holding the thread locked until the reaper is reaped rules that out.
func (p *Process) own(started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := p.cmd.Start(); err != nil {
		started <- err
		close(p.done)
		return
	}
	started <- nil
	werr := p.cmd.Wait()
	<-p.hs // the handshake reads the status pipe first
	p.result, p.err = p.finish(werr)
	p.statusR.Close()
	close(p.done)
}

// handshake reads the reaper's first status line: the kernel's pid, or why it did not start.
func (p *Process) handshake(ctx context.Context) error {
	if dl, ok := ctx.Deadline(); ok {
		_ = p.statusR.SetReadDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = p.statusR.SetReadDeadline(time.Now()) })
	defer stop()
	line, err := p.readLine()
	_ = p.statusR.SetReadDeadline(time.Time{})
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if errors.Is(err, io.EOF) {
			return io.EOF // Start explains it once the reaper is reaped
		}
		return fmt.Errorf("read reaper status: %w", err)
	}
	m, err := parseMessage(line)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	switch m.kind {
	case kindPID:
		p.kernelPID = m.pid
		return nil
	case kindErr:
		if m.errno != 0 {
			return fmt.Errorf("reaper: %s: %w", m.text, m.errno)
		}
		return fmt.Errorf("reaper: %s: %w", m.text, ErrHandshake)
	}
	return fmt.Errorf("reaper said %q before the kernel started: %w", m.kind, ErrHandshake)
}

// readLine reads one status line, bounded by maxLine.
func (p *Process) readLine() (string, error) {
	b, err := p.status.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return "", fmt.Errorf("status line over %d bytes: %w", maxLine, ErrProtocol)
	}
	if err != nil {
		if len(b) > 0 && errors.Is(err, io.EOF) {
			return "", fmt.Errorf("status line cut short: %w", ErrProtocol)
		}
		return "", err
	}
	return string(b[:len(b)-1]), nil
}

// exitDesc describes how the reaper process itself ended; only after done.
func (p *Process) exitDesc() string {
	if p.cmd.ProcessState == nil {
		return "?"
	}
	return p.cmd.ProcessState.String()
}

// finish reads the reaper's last word after it was reaped.
func (p *Process) finish(werr error) (Status, error) {
	if p.kernelPID == 0 {
		// The handshake did not succeed; Start reports why.
		return Status{}, nil
	}
	line, err := p.readLine()
	if err == nil {
		m, perr := parseMessage(line)
		if perr == nil && m.kind == kindExit {
			return m.status, nil
		}
		err = perr
		if err == nil {
			err = fmt.Errorf("reaper said %q at its end: %w", m.kind, ErrProtocol)
		}
	}
	st := Status{Code: -1, Signal: syscall.SIGKILL}
	if ps := p.cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
			st = statusOf(ws)
		}
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return st, fmt.Errorf("reaper %d ended (%s) without the kernel's status: %w",
		p.Pid(), st, errors.Join(ErrLost, err, ignoreExitError(werr)))
}

func ignoreExitError(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return nil
	}
	return err
}

// Pid is the reaper's pid.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// KernelPID is the kernel's pid. It names the kernel's process group too.
func (p *Process) KernelPID() int { return p.kernelPID }

// Terminate asks the reaper to end the kernel gracefully: it forwards SIGTERM to the
// kernel's process group and kills hard after its grace. It returns once the signal is
// sent, not when the kernel has ended; a reaper already reaped is not an error.
func (p *Process) Terminate() error { return p.signal(syscall.SIGTERM) }

// Kill tells the reaper to kill the kernel and everything it started at once.
// It returns once the signal is sent; Wait confirms the end.
func (p *Process) Kill() error { return p.signal(syscall.SIGUSR1) }

// KillReaper SIGKILLs the reaper itself: a last resort for a reaper that does not end,
// which leaves the kernel's tree to the stdin-EOF and owner-pid watches of the kernel.
func (p *Process) KillReaper() error { return p.signal(syscall.SIGKILL) }

func (p *Process) signal(sig syscall.Signal) error {
	err := p.cmd.Process.Signal(sig)
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal reaper %d: %w", p.Pid(), err)
	}
	return nil
}

// stop kills hard and falls back to SIGKILL of the reaper if it does not end in time.
func (p *Process) stop() {
	p.stopOnce.Do(func() {
		_ = p.Kill()
		go func() {
			t := time.NewTimer(stopGrace)
			defer t.Stop()
			select {
			case <-p.done:
			case <-t.C:
				_ = p.KillReaper()
			}
		}()
	})
}

// Wait blocks until the reaper has been reaped and returns the kernel's status. It may be
// called any number of times, concurrently; every call returns the same result.
func (p *Process) Wait() (Status, error) {
	<-p.done
	return p.result, p.err
}
