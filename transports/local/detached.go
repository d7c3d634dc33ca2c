package local

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/internal/procfs"
	"github.com/kennel-dev/kennel/link"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
	"github.com/kennel-dev/kennel/transports/internal/linked"
)

// DefaultKernelGrace is how long a detached kernel stays alive with nothing attached
// (sent in every attach) when Options.KernelGrace is zero.
const DefaultKernelGrace = time.Hour

// launchTimeout bounds a detached kernel's start: from exec to its socket answering.
const launchTimeout = 30 * time.Second

// detached is a local kernel started detached: its own session, reached over kernel.sock
// in its run directory through a link (its streams, end, record and Detach are
// linked.Detached's). It is this process's child when this process started it (child),
// and otherwise a kernel an earlier controller started (Reattach), whose end a pidfd
// tells.
type detached struct {
	*linked.Detached
	child bool

	exited <-chan struct{} // closed once the kernel has ended (and, a child, been reaped)

	mu   sync.Mutex
	jobs map[string]jobGroup // live jobs by id: the group each leads, verified at job_start
}

var (
	_ transports.HostGroups = (*detached)(nil)
	_ transports.Detachable = (*detached)(nil)
	_ transports.Reattacher = (*Transport)(nil)
)

// startDetached launches python running the stub in dir, detached, and attaches to it.
func (t *Transport) startDetached(ctx context.Context, spec transports.Spec, python string, b bundleDir, env kernelstart.Env) (transports.Kernel, error) {
	id, token := randomHex(8), randomHex(32)
	if err := os.MkdirAll(t.opts.RunDir, 0o700); err != nil {
		return nil, fmt.Errorf("run directory root: %w", err)
	}
	runDir := filepath.Join(t.opts.RunDir, id)
	if err := os.Mkdir(runDir, 0o700); err != nil {
		return nil, fmt.Errorf("run directory: %w", err)
	}
	fail := func(err error) (transports.Kernel, error) {
		_ = os.RemoveAll(runDir) // the kernel, if it started, ends within a second
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(runDir, "kernel.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fail(err)
	}
	defer logf.Close()
	tokR, tokW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	env.Detached = runDir
	argv := images.KernelArgv(python, b.dir)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env.Build(spec.Env)
	cmd.Dir = spec.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tokR, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	tokR.Close()
	if err != nil {
		tokW.Close()
		return fail(fmt.Errorf("start detached kernel: %w", err))
	}
	_, werr := io.WriteString(tokW, token+"\n")
	tokW.Close()
	exited := make(chan struct{})
	var exit transports.Exit
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		exit = exitOf(cmd.ProcessState)
		close(exited)
	}()
	kill := func(err error) (transports.Kernel, error) {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // its session's group; ours until reaped
		<-exited
		return fail(err)
	}
	if werr != nil {
		return kill(fmt.Errorf("hand the token to the detached kernel: %w", werr))
	}
	launch := linked.NewLaunch(filepath.Join(runDir, "kernel.sock"), exited)
	lctx, cancel := context.WithTimeout(ctx, launchTimeout)
	defer cancel()
	k, err := t.attach(lctx, attachment{
		rec:  transports.Record{Transport: Name, Kernel: id, RunDir: runDir, Token: token, PID: cmd.Process.Pid, Grace: t.kernelGrace()},
		dial: launch.Dial, child: true, exited: exited,
		backoff: link.Backoff{First: 5 * time.Millisecond, Max: 100 * time.Millisecond, Tries: int(launchTimeout / (100 * time.Millisecond))},
		exit: func() (transports.Exit, error) {
			var ee *exec.ExitError
			if waitErr != nil && !errors.As(waitErr, &ee) {
				return exit, waitErr
			}
			return exit, nil
		},
	})
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(runDir, "kernel.log"))
		return kill(fmt.Errorf("%w (kernel.log: %q)", err, log[max(0, len(log)-2048):]))
	}
	launch.Started()
	return k, nil
}

// attachment is how attach reaches a detached kernel and sees its end.
type attachment struct {
	// rec names the kernel (Kernel, RunDir, Token, Applied) and its process (PID, and
	// for a reattach PGID and Leader, which the hello must repeat).
	rec     transports.Record
	dial    link.Dialer
	backoff link.Backoff
	// child: the kernel is this process's child, reaped by whoever closes exited.
	child  bool
	exited <-chan struct{}
	// exit is how the kernel ended, once exited is closed.
	exit func() (transports.Exit, error)
}

// attach opens the kernel's link and checks its hello against the record: the pid, and
// for a reattach the group and the leader's start time.
func (t *Transport) attach(ctx context.Context, a attachment) (*detached, error) {
	var k *detached
	var kMu sync.Mutex
	onFrame := func(frame []byte) {
		kMu.Lock()
		kk := k
		kMu.Unlock()
		if kk != nil {
			kk.observe(frame)
		}
	}
	id := a.rec.Kernel
	client, err := link.Open(ctx, link.Options{
		Kernel: id, Token: a.rec.Token, Grace: t.kernelGrace(), Dial: a.dial, OnFrame: onFrame,
		Backoff: a.backoff, Applied: a.rec.Applied,
	})
	if err != nil {
		return nil, fmt.Errorf("attach to detached kernel %s: %w", id, err)
	}
	h := client.Hello()
	if h.PID != a.rec.PID || (!a.child && (h.PGID != a.rec.PGID || h.Leader != a.rec.Leader)) {
		client.Close()
		return nil, fmt.Errorf("detached kernel %s: its hello names pid %d (group %d, start %d), the record %d (group %d, start %d): %w",
			id, h.PID, h.PGID, h.Leader, a.rec.PID, a.rec.PGID, a.rec.Leader, link.ErrBadHello)
	}
	kMu.Lock()
	defer kMu.Unlock()
	rec := a.rec
	rec.PGID, rec.Leader, rec.Grace = h.PGID, h.Leader, t.kernelGrace()
	k = &detached{
		Detached: linked.NewDetached(client, transports.Info{Transport: Name, PID: h.PID, HostPIDs: true, ID: id}, rec),
		child:    a.child,
		jobs:     map[string]jobGroup{},
		exited:   a.exited,
	}
	for _, j := range h.Jobs { // the live jobs an earlier controller saw start; k is not shared yet
		k.track(j.ID, j.PID, j.PGID)
	}
	stdinGrace, termGrace := transports.ResolveGrace(t.opts.StdinGrace), transports.ResolveGrace(t.opts.TermGrace)
	pid, runDir := h.PID, rec.RunDir
	k.Watch = transports.NewWatch(transports.WatchSpec{
		What: fmt.Sprintf("detached local kernel %d", pid),
		Steps: []transports.Step{
			{Act: func() { _ = k.Stdin().Close() }, Grace: stdinGrace},
			// Live: until its end is seen the kernel's pid is its own (a child's until
			// reaped; another's pidfd holds it), and so is its group's id.
			{Act: func() { _ = syscall.Kill(-pid, syscall.SIGTERM) }, Grace: termGrace, Live: true},
			{Act: func() { k.killAll(pid) }, Live: true},
		},
		Reap: func(func() bool) (transports.Exit, error) {
			<-a.exited
			// The kernel ended its jobs at its end; a job it could not (a KILLed
			// kernel) is ended here, from the groups it reported.
			k.killJobs()
			client.Close()
			_ = os.RemoveAll(runDir)
			return a.exit()
		},
	})
	return k, nil
}

// Reattach reaches a detached kernel again from its record, as a controller started
// after the one that started it does: the record's process must still run (its pid with
// the same start time), its socket answer and its hello repeat the record's pid, group
// and start time. The kernel's end is seen through a pidfd (it is no child of this
// process); its exit status is not known, so the Exit is zero unless Kill ended it.
// A kernel that is gone (no process, a later process on its pid, no socket, a refused
// attach) is an error matching errdefs.ErrNotFound, and its run directory and any job
// group it left are cleared; RunDir must lie under Options.RunDir.
func (t *Transport) Reattach(ctx context.Context, rec transports.Record) (transports.Kernel, error) {
	if rec.Transport != Name || rec.Kernel == "" || rec.Token == "" || rec.PID <= 1 ||
		t.opts.RunDir == "" || filepath.Dir(filepath.Clean(rec.RunDir)) != filepath.Clean(t.opts.RunDir) || filepath.Base(rec.RunDir) != rec.Kernel {
		return nil, fmt.Errorf("reattach local kernel %q: record %+v is not one of this transport's (run directory under %q): %w", rec.Kernel, redacted(rec), t.opts.RunDir, errdefs.ErrInvalidArgument)
	}
	gone := func(why string) (transports.Kernel, error) {
		_ = os.RemoveAll(rec.RunDir) // a kernel still there ends within a second
		return nil, fmt.Errorf("reattach local kernel %s: %s: %w", rec.Kernel, why, link.ErrGone)
	}
	exited, err := watchExit(rec.PID, rec.Leader)
	if err != nil {
		return gone(err.Error())
	}
	k, err := t.attach(ctx, attachment{
		rec: rec, dial: link.DialUnix(filepath.Join(rec.RunDir, "kernel.sock")), exited: exited,
		exit: func() (transports.Exit, error) { return transports.Exit{}, nil },
	})
	if errors.Is(err, link.ErrGone) || errors.Is(err, link.ErrBadHello) {
		return gone(err.Error())
	}
	if err != nil {
		return nil, fmt.Errorf("reattach local kernel %s: %w", rec.Kernel, err)
	}
	return k, nil
}

// redacted is rec without its token, for errors.
func redacted(rec transports.Record) transports.Record {
	if rec.Token != "" {
		rec.Token = "(set)"
	}
	return rec
}

// watchExit returns a channel closed when process pid, started at start (clock ticks
// since boot), has ended. It fails when no such process runs (none, or a later one on
// the pid). The wait costs no thread: the process's pidfd sits in Go's poller.
func watchExit(pid int, start uint64) (<-chan struct{}, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	// Checked after the pidfd is open, so the pidfd is of the process checked.
	if st, err := procfs.Read(pid); err != nil || st.Start != start || st.Zombie() {
		unix.Close(fd)
		return nil, fmt.Errorf("process %d is not the kernel's (started at %d): it ended", pid, start)
	}
	f := os.NewFile(uintptr(fd), fmt.Sprintf("pidfd %d", pid))
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		defer f.Close()
		// A pidfd turns readable when its process ends; Read waits in the poller until
		// the function reports it is.
		_ = rc.Read(func(fd uintptr) bool {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(fds, 0)
			return err != nil || n > 0
		})
	}()
	return exited, nil
}

func (t *Transport) kernelGrace() time.Duration {
	if t.opts.KernelGrace > 0 {
		return t.opts.KernelGrace
	}
	return DefaultKernelGrace
}

// jobGroup is a job's process group as verified at its job_start: its leader's pid
// (= pgid) and start time, so a group id freed and given to another process is never
// signalled.
type jobGroup struct {
	pgid  int
	start uint64
}

// observe follows job_start and job_end frames so the groups of a kernel's live jobs can
// be ended when the kernel itself is KILLed. A group is kept only once verified, and
// forgotten at its job's end.
func (k *detached) observe(line []byte) {
	var f struct {
		Event string `json:"event"`
		ID    string `json:"id"`
		PID   int    `json:"pid"`
		PGID  int    `json:"pgid"`
	}
	start := bytes.HasPrefix(line, []byte(`{"event":"job_start"`))
	if !start && !bytes.HasPrefix(line, []byte(`{"event":"job_end"`)) {
		return
	}
	if json.Unmarshal(line, &f) != nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if !start {
		delete(k.jobs, f.ID)
		return
	}
	k.track(f.ID, f.PID, f.PGID)
}

// track keeps job id's group once verified: pid leads group pgid and is the kernel's
// child. k.mu is held, or k is not shared yet.
func (k *detached) track(id string, pid, pgid int) {
	if verifyGroup(pid, pgid, k.Info().PID) != nil {
		return
	}
	if st, err := procfs.Read(pid); err == nil {
		k.jobs[id] = jobGroup{pgid: pgid, start: st.Start}
	}
}

// killAll ends the kernel and everything below it: the kernel is stopped (it starts
// nothing more), every descendant and the group each leads is SIGKILLed until none is
// left (the kernel is their subreaper, so orphans are below it too), then its jobs'
// groups; the kernel is let go on for up to a second to reap them and end, and past that
// second for as long as a zombie of its is still there (up to reapWait in all: killed
// while it holds one, its zombies would go to init, which reaps when it gets to it); then
// its group is SIGKILLed.
func (k *detached) killAll(pid int) {
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	for range 100 {
		left := descendants(pid)
		if len(left) == 0 {
			break
		}
		for _, d := range left {
			_ = syscall.Kill(-d, syscall.SIGKILL)
			_ = syscall.Kill(d, syscall.SIGKILL)
		}
		time.Sleep(5 * time.Millisecond)
	}
	k.killJobs()
	// Let it go on to its own end (it has had its SIGTERM): it reaps what was killed
	// below it, so no zombie of its is left to init. Then the hard stop.
	_ = syscall.Kill(pid, syscall.SIGCONT)
	start := time.Now()
	for {
		select {
		case <-k.exited:
			return
		case <-time.After(10 * time.Millisecond):
		}
		if d := time.Since(start); d >= reapWait || (d >= time.Second && !hasZombie(pid)) {
			break
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

// reapWait bounds how long killAll lets a kernel go on to reap what it killed below it.
const reapWait = 5 * time.Second

// hasZombie reports whether a child of pid has ended and waits to be reaped.
func hasZombie(pid int) bool {
	all, err := procfs.All()
	if err != nil {
		return false
	}
	for _, st := range all {
		if st.PPID == pid && st.Zombie() {
			return true
		}
	}
	return false
}

// descendants lists the live (not zombie) processes below root, from /proc.
func descendants(root int) []int {
	all, err := procfs.All()
	if err != nil {
		return nil
	}
	kids := map[int][]int{}
	for _, st := range all {
		if !st.Zombie() && st.PID != root {
			kids[st.PPID] = append(kids[st.PPID], st.PID)
		}
	}
	var found []int
	for todo := kids[root]; len(todo) > 0; {
		pid := todo[len(todo)-1]
		todo = append(todo[:len(todo)-1], kids[pid]...)
		found = append(found, pid)
	}
	return found
}

// killJobs SIGKILLs the group of every live job the kernel reported, unless its id now
// names another process's group (its leader's pid taken by a later process).
func (k *detached) killJobs() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for id, g := range k.jobs {
		if st, err := procfs.Read(g.pgid); err == nil && st.Start != g.start {
			delete(k.jobs, id) // the id is another process's now: its job's group is gone
			continue
		}
		if alive, _ := groupAlive(g.pgid); alive {
			_ = syscall.Kill(-g.pgid, syscall.SIGKILL)
		} else {
			delete(k.jobs, id)
		}
	}
}

// VerifyGroup checks a job's group against /proc: it leads its group and is the kernel's
// child.
func (k *detached) VerifyGroup(pid, pgid int) error { return verifyGroup(pid, pgid, k.Info().PID) }

// GroupAlive reports whether group pgid has a live member (false once the kernel ended).
func (k *detached) GroupAlive(pgid int) (bool, error) {
	if err := checkPGID("probe", pgid); err != nil {
		return false, err
	}
	return groupAlive(pgid)
}

// KillGroup SIGKILLs group pgid, unless the kernel has ended.
func (k *detached) KillGroup(pgid int) error {
	return killGroup(pgid, k.Watch, fmt.Sprintf("detached kernel %d", k.Info().PID))
}

func exitOf(ps *os.ProcessState) transports.Exit {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return transports.Exit{Code: -1, Signal: int(ws.Signal())}
	}
	return transports.Exit{Code: ps.ExitCode()}
}

// randomHex is n random bytes in hex (crypto/rand.Read never fails).
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
