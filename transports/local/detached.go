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

// Record is what a controller must keep to reach a detached kernel again: its id, run
// directory and token, and the process the hello named (pid, pgid, leader start time).
type Record struct {
	ID     string
	RunDir string
	Token  string
	PID    int
	PGID   int
	Leader uint64
}

// Detacher is a kernel that can be let go: Detach closes its link and leaves it running
// (its grace begins); the Kernel is finished for this controller.
type Detacher interface {
	Detach() error
	Record() Record
}

// detached is a local kernel started detached: its own session, reached over kernel.sock
// in its run directory through a link.
type detached struct {
	*linked.Streams
	client *link.Client
	rec    Record
	info   transports.Info
	watch  *transports.Watch

	exited <-chan struct{} // closed once the kernel has been reaped

	mu   sync.Mutex
	jobs map[string]jobGroup // live jobs by id: the group each leads, verified at job_start
}

var (
	_ transports.HostGroups = (*detached)(nil)
	_ Detacher              = (*detached)(nil)
)

// startDetached launches python running the stub in dir, detached, and attaches to it.
func (t *Transport) startDetached(ctx context.Context, spec transports.Spec, python string, b bundleDir, env kernelstart.Env) (transports.Kernel, error) {
	id, err := randomHex(8)
	if err != nil {
		return nil, err
	}
	token, err := randomHex(32)
	if err != nil {
		return nil, err
	}
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
	lctx, cancel := context.WithTimeout(ctx, launchTimeout)
	defer cancel()
	client, err := link.Open(lctx, link.Options{
		Kernel: id, Token: token, Grace: t.kernelGrace(), Dial: launch.Dial, OnFrame: onFrame,
		Backoff: link.Backoff{First: 5 * time.Millisecond, Max: 100 * time.Millisecond, Tries: int(launchTimeout / (100 * time.Millisecond))},
	})
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(runDir, "kernel.log"))
		return kill(fmt.Errorf("attach to detached kernel %s: %w (kernel.log: %q)", id, err, tail(log, 2048)))
	}
	launch.Started()
	h := client.Hello()
	if h.PID != cmd.Process.Pid {
		client.Close()
		return kill(fmt.Errorf("detached kernel %s: its hello names pid %d, it runs as %d: %w", id, h.PID, cmd.Process.Pid, link.ErrBadHello))
	}
	kMu.Lock()
	defer kMu.Unlock()
	k = &detached{
		client: client,
		rec:    Record{ID: id, RunDir: runDir, Token: token, PID: h.PID, PGID: h.PGID, Leader: h.Leader},
		info:   transports.Info{Transport: Name, PID: h.PID, HostPIDs: true, ID: id},
		jobs:   map[string]jobGroup{},
		exited: exited,
	}
	k.Streams = linked.New(client)
	stdinGrace, termGrace := transports.ResolveGrace(t.opts.StdinGrace), transports.ResolveGrace(t.opts.TermGrace)
	pid := h.PID
	k.watch = transports.NewWatch(transports.WatchSpec{
		What: fmt.Sprintf("detached local kernel %d", pid),
		Steps: []transports.Step{
			{Act: func() { _ = k.Stdin().Close() }, Grace: stdinGrace},
			// Live: the kernel is our child until reaped, so its group id is its own.
			{Act: func() { _ = syscall.Kill(-pid, syscall.SIGTERM) }, Grace: termGrace, Live: true},
			{Act: func() { k.killAll(pid) }, Live: true},
		},
		Reap: func(func() bool) (transports.Exit, error) {
			<-exited
			// The kernel ended its jobs at its end; a job it could not (a KILLed
			// kernel) is ended here, from the groups it reported.
			k.killJobs()
			client.Close()
			_ = os.RemoveAll(runDir)
			var ee *exec.ExitError
			if waitErr != nil && !errors.As(waitErr, &ee) {
				return exit, waitErr
			}
			return exit, nil
		},
	})
	return k, nil
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
	if verifyGroup(f.PID, f.PGID, k.info.PID) != nil {
		return
	}
	if st, err := procfs.Read(f.PID); err == nil {
		k.jobs[f.ID] = jobGroup{pgid: f.PGID, start: st.Start}
	}
}

// killAll ends the kernel and everything below it: the kernel is stopped (it starts
// nothing more), every descendant and the group each leads is SIGKILLed until none is
// left (the kernel is their subreaper, so orphans are below it too), then its jobs'
// groups; the kernel is let go on for up to a second to reap them and end, then its group
// is SIGKILLed.
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
	select {
	case <-k.exited:
	case <-time.After(time.Second):
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
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

// liveJobs is how many job groups the kernel is known to lead (for tests).
func (k *detached) liveJobs() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.jobs)
}

// Info reports the kernel's pid (the stub, leader of its own session and group) and its
// id (the run directory's name).
func (k *detached) Info() transports.Info { return k.info }

// Kill ends the kernel: shutdown through the link, grace, SIGTERM to its group, grace,
// SIGKILL to its group and its jobs' groups; confirmed by its reaping.
func (k *detached) Kill(ctx context.Context) error { return k.watch.Kill(ctx) }

// Wait blocks until the kernel has exited and been reaped.
func (k *detached) Wait() (transports.Exit, error) { return k.watch.Wait() }

// Detach closes the link; the kernel runs on, alone, for its grace.
func (k *detached) Detach() error { return k.client.Close() }

// Record is what reattaching to the kernel takes.
func (k *detached) Record() Record { return k.rec }

// Link is the kernel's link (for tests and reattach counts).
func (k *detached) Link() *link.Client { return k.client }

// VerifyGroup checks a job's group against /proc: it leads its group and is the kernel's
// child.
func (k *detached) VerifyGroup(pid, pgid int) error { return verifyGroup(pid, pgid, k.info.PID) }

// GroupAlive reports whether group pgid has a live member (false once the kernel ended).
func (k *detached) GroupAlive(pgid int) (bool, error) {
	if err := checkPGID("probe", pgid); err != nil {
		return false, err
	}
	return groupAlive(pgid)
}

// KillGroup SIGKILLs group pgid, unless the kernel has ended.
func (k *detached) KillGroup(pgid int) error {
	if err := checkPGID("kill", pgid); err != nil {
		return err
	}
	select {
	case <-k.watch.Ended():
		return fmt.Errorf("kill process group %d: detached kernel %d ended: %w", pgid, k.info.PID, os.ErrProcessDone)
	default:
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill process group %d: %w", pgid, err)
	}
	return nil
}

func exitOf(ps *os.ProcessState) transports.Exit {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return transports.Exit{Code: -1, Signal: int(ws.Signal())}
	}
	return transports.Exit{Code: ps.ExitCode()}
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
