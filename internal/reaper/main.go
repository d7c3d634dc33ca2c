package reaper

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// statusFD is the descriptor of the status pipe in a reaper process.
const statusFD = 3

// Main runs the reaper when this process was started as one, and reports false otherwise.
//
// The process is a reaper when the marker variable KENNEL_REAPER is set and the first
// argument is "--kennel-reaper"; the arguments after it are the kernel's argv. Then Main
// never returns: it runs the kernel, reaps everything it started, and calls os.Exit with
// the kernel's exit code (128+signal when a signal ended it). Otherwise it returns false at
// once, having changed nothing.
//
// This package's init calls it, so a reaper process runs before the packages initialized
// after this one (the heavy clients of the other transports) spend its start-up; main and
// TestMain call it too, first thing, before flags are parsed or goroutines started.
func Main() bool {
	v, ok := os.LookupEnv(envMarker)
	if !ok || len(os.Args) < 2 || os.Args[1] != argGuard {
		return false
	}
	os.Exit(serve(v, os.Args[2:]))
	return false
}

// serve is the reaper process: it returns the code to exit with.
func serve(marker string, argv []string) int {
	// The main goroutine stays on one thread for the reaper's life: it forks the kernel,
	// and the kernel's PDEATHSIG is tied to the thread that forked it.
	runtime.LockOSThread()
	status := os.NewFile(statusFD, "kennel-reaper-status")
	syscall.CloseOnExec(statusFD)
	_ = os.WriteFile("/proc/self/comm", []byte("kennel-reaper"), 0)

	fail := func(code int, err error) int {
		fmt.Fprintf(os.Stderr, "kennel-reaper: %v\n", err)
		_, _ = status.WriteString(formatErr(err))
		return code
	}
	cfg, err := parseConfig(marker)
	if err != nil {
		return fail(125, err)
	}
	if len(argv) == 0 || argv[0] == "" {
		return fail(125, fmt.Errorf("reaper: no kernel command: %w", ErrConfig))
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fail(125, fmt.Errorf("reaper: set child subreaper: %w", err))
	}
	// Also set by the launcher between fork and exec; setting it again here keeps a reaper
	// started by other means tied to its parent too.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0, 0, 0); err != nil {
		return fail(125, fmt.Errorf("reaper: set parent-death signal: %w", err))
	}
	if os.Getppid() != cfg.parent {
		return fail(125, errors.New("reaper: controller gone before the kernel started"))
	}

	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1)

	pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{
		Env:   withoutMarker(os.Environ()),
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM},
	})
	if err != nil {
		return fail(127, fmt.Errorf("start kernel %s: %w", argv[0], err))
	}
	_, _ = status.WriteString(formatPID(pid))
	// The kernel holds the frame pipes; the reaper lets go of its copies so that only the
	// kernel's tree keeps them open. Stderr stays for the reaper's own diagnostics.
	if null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
		_ = unix.Dup3(int(null.Fd()), 0, 0)
		_ = unix.Dup3(int(null.Fd()), 1, 0)
		null.Close()
	}

	l := &loop{self: os.Getpid(), kernel: pid, grace: cfg.grace}
	st := l.run(sigs)
	_, _ = status.WriteString(formatExit(st))
	return st.exitCode()
}

// loop is the reaper's state after the kernel started. Only serve's goroutine touches it:
// reaping and killing happen on one goroutine, so a child the loop signals is never one it
// has already reaped (its pid cannot have been reused).
type loop struct {
	self, kernel int
	grace        time.Duration

	kernelDone bool
	status     Status
	termSent   bool
	hard       bool
	timer      <-chan time.Time
}

// sweepTick bounds the wait between two sweeps when no SIGCHLD arrives (a child in
// uninterruptible sleep).
const sweepTick = 50 * time.Millisecond

// run waits for the kernel and answers signals until the kernel has exited and the reaper
// has no child left, and returns the kernel's status.
func (l *loop) run(sigs <-chan os.Signal) Status {
	for {
		none := l.reap()
		var tick <-chan time.Time
		if l.kernelDone || l.hard {
			if none {
				return l.status
			}
			l.sweep()
			tick = time.After(sweepTick)
		}
		select {
		case s := <-sigs:
			switch s {
			case syscall.SIGUSR1:
				l.killHard()
			case syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP:
				l.terminate()
			}
		case <-l.timer:
			l.killHard()
		case <-tick:
		}
	}
}

// reap collects every exited child without blocking and reports whether the reaper has no
// child at all.
func (l *loop) reap() (none bool) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if errors.Is(err, syscall.ECHILD) {
			return true
		}
		if err != nil || pid <= 0 {
			return false
		}
		if pid == l.kernel && !l.kernelDone {
			l.kernelDone = true
			l.status = statusOf(ws)
		}
	}
}

// statusOf turns a wait status into a Status.
func statusOf(ws syscall.WaitStatus) Status {
	if ws.Signaled() {
		return Status{Code: -1, Signal: ws.Signal()}
	}
	return Status{Code: ws.ExitStatus()}
}

// terminate forwards SIGTERM to the kernel's process group once and arms the hard kill.
func (l *loop) terminate() {
	if l.termSent || l.hard {
		return
	}
	l.termSent = true
	if !l.kernelDone {
		_ = syscall.Kill(-l.kernel, syscall.SIGTERM)
		_ = syscall.Kill(l.kernel, syscall.SIGTERM)
	}
	l.timer = time.After(l.grace)
}

// killHard SIGKILLs the kernel's process group and starts the sweep.
func (l *loop) killHard() {
	if l.hard {
		return
	}
	l.hard = true
	l.timer = nil
	if !l.kernelDone {
		// The kernel is not reaped, so its pid (and the group it leads) is still its own.
		_ = syscall.Kill(-l.kernel, syscall.SIGKILL)
		_ = syscall.Kill(l.kernel, syscall.SIGKILL)
	}
}

// sweep SIGKILLs every child of the reaper and the process group each one names. Their own
// children are reparented to the reaper when they die, and the next sweep gets them.
func (l *loop) sweep() {
	kids, err := children(l.self)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kennel-reaper: %v\n", err)
		return
	}
	for _, k := range kids {
		// k is an unreaped child: neither its pid nor a group with its id can belong to
		// anyone outside the subtree.
		_ = syscall.Kill(-k.PID, syscall.SIGKILL)
		_ = syscall.Kill(k.PID, syscall.SIGKILL)
	}
}
