package ssh_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/internal/procfs"
	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/ssh"
	"github.com/kennel-dev/kennel/transports/ssh/sshtest"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// lostKernel is a remote kernel in the middle of a long cell, as the tests of a lost
// connection find it: the kernel's pid and start time on the host, its run's marker, and
// the sshd child that serves its connection.
type lostKernel struct {
	k      transports.Kernel
	c      *transporttest.Client
	pid    int
	start  uint64
	marker []byte
	sshd   int // the session's sshd child
}

// startAsleep starts a kernel on srv through h and runs `time.sleep(100)` in it; it
// returns once the cell runs. The kernel is stopped and its stdout drained when the test
// ends, whatever its end.
func startAsleep(t *testing.T, srv *sshtest.Server, h *ssh.Hosts) *lostKernel {
	t.Helper()
	return startAsleepWith(t, srv, h, ssh.Options{Target: sshtest.Alias, StdinGrace: 500 * time.Millisecond, TermGrace: 500 * time.Millisecond})
}

// startAsleepWith is startAsleep with the transport's options.
func startAsleepWith(t *testing.T, srv *sshtest.Server, h *ssh.Hosts, opts ssh.Options) *lostKernel {
	t.Helper()
	tr := ssh.New(h, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, err := tr.Start(ctx, transports.Spec{SessionID: t.Name(), Dir: "/"})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	c := transporttest.NewClient(k)
	c.Timeout = 30 * time.Second
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = k.Kill(ctx)
		_, _ = k.Wait()
		_ = c.End(30 * time.Second)
	})
	hello, err := c.Hello()
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := hello.Fields["pid"].(float64)
	lk := &lostKernel{k: k, c: c, pid: int(pid)}
	st, err := procfs.Read(lk.pid)
	if err != nil {
		t.Fatalf("the kernel's pid %d from its hello: %v", lk.pid, err)
	}
	lk.start = st.Start
	id := k.Info().ID
	runDir := id[strings.Index(id, ":/")+1:]
	lk.marker = []byte("KENNEL_REMOTE_RUN=" + filepath.Base(runDir) + "\x00")
	rec, err := os.ReadFile(filepath.Join(runDir, "pid"))
	if err != nil || strings.Fields(string(rec))[0] != strconv.Itoa(lk.pid) {
		t.Fatalf("the run directory records %q, %v; want the kernel's pid %d first", rec, err, lk.pid)
	}
	if lk.sshd, err = srv.SessionProcess(lk.pid); err != nil {
		t.Fatal(err)
	}
	id2, err := c.Send(`print("asleep", flush=True)
import time
time.sleep(100)`)
	if err != nil {
		t.Fatal(err)
	}
	for {
		f, err := c.Next()
		if err != nil {
			t.Fatalf("waiting for the cell to sleep: %v", err)
		}
		if f.ID() == id2 && f.Event() == "stream" && strings.Contains(f.Str("text"), "asleep") {
			break
		}
	}
	return lk
}

// alive reports whether the kernel's process (its pid with its start time) is still
// running: a zombie its stopped or dead parent has not reaped counts as ended.
func (lk *lostKernel) alive() bool {
	st, err := procfs.Read(lk.pid)
	return err == nil && st.Start == lk.start && !st.Zombie()
}

// waitEnded waits up to d until neither the kernel nor any process marked with its run
// is alive on the host.
func (lk *lostKernel) waitEnded(t *testing.T, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for lk.alive() || countEnv(lk.marker) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%v after the connection was lost: the kernel (pid %d) alive %v, %d processes carry the run's marker",
				d, lk.pid, lk.alive(), countEnv(lk.marker))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitErr returns Wait's result, failing the test if it does not come within d.
func waitErr(t *testing.T, k transports.Kernel, d time.Duration) error {
	t.Helper()
	ch := make(chan error, 1)
	go func() {
		_, err := k.Wait()
		ch <- err
	}()
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		t.Fatalf("Wait did not return within %v of the connection's loss", d)
		return nil
	}
}

// checkNamesConnection fails the test unless err names the connection to srv.
func checkNamesConnection(t *testing.T, what string, err error, srv *sshtest.Server, fault string) {
	t.Helper()
	conn := "root@" + sshtest.Alias + ":" + strconv.Itoa(srv.Port)
	if err == nil || !strings.Contains(err.Error(), conn) || !strings.Contains(err.Error(), fault) ||
		!errors.Is(err, ssh.ErrUnreachable) {
		t.Fatalf("%s: %v; want an ErrUnreachable naming the connection %s and %q", what, err, conn, fault)
	}
}

// A kernel whose connection drops mid-cell (the session's sshd child killed) is ended on
// the host through a fresh connection: its Wait and its stdout say which connection was
// lost, and within seconds neither the kernel nor anything marked with its run is alive.
func TestLostConnectionEndsRemoteKernel(t *testing.T) {
	srv := sshtest.Start(t)
	h := newHosts(t, srv)
	lk := startAsleep(t, srv, h)
	if env, err := os.ReadFile("/proc/" + strconv.Itoa(lk.pid) + "/environ"); err != nil || !bytes.Contains(env, lk.marker) {
		t.Fatalf("the kernel's own environment lacks the run's marker %q (%v): the sweep could not find it", lk.marker, err)
	}
	lost := time.Now()
	if err := testproc.Kill(lk.sshd, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := waitErr(t, lk.k, 15*time.Second)
	t.Logf("Wait returned %.1fs after the kill: %v", time.Since(lost).Seconds(), err)
	checkNamesConnection(t, "Wait", err, srv, "connection lost")
	checkNamesConnection(t, "stdout", lk.c.End(10*time.Second), srv, "connection lost")
	lk.waitEnded(t, 10*time.Second)
	t.Logf("the remote kernel ended %.1fs after the kill", time.Since(lost).Seconds())
}

// A connection whose peer goes silent (the session's sshd child stopped: the TCP
// connection stays open, nothing answers) is closed once keepalives go unanswered; the
// kernel's stream ends with a keepalive error and the kernel is ended through a fresh
// connection (the listening sshd still accepts them).
func TestSilentConnectionEndsRemoteKernel(t *testing.T) {
	srv := sshtest.Start(t)
	h, err := ssh.NewHosts(ssh.HostsOptions{
		ConfigFile:  srv.ConfigFile,
		KnownHosts:  srv.KnownHosts,
		AgentSocket: "none",
		KeepAlive:   time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	lk := startAsleep(t, srv, h)
	if err := testproc.Kill(lk.sshd, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testproc.Kill(lk.sshd, syscall.SIGCONT) })
	silent := time.Now()
	end := make(chan error, 1)
	go func() { end <- lk.c.End(time.Minute) }()
	select {
	case err := <-end:
		t.Logf("stdout ended %.1fs after the peer went silent: %v", time.Since(silent).Seconds(), err)
		checkNamesConnection(t, "stdout", err, srv, "keepalive")
	case <-time.After(15*time.Second + 5*time.Second):
		t.Fatal("the kernel's stdout did not end within 20 s of its connection going silent")
	}
	checkNamesConnection(t, "Wait", waitErr(t, lk.k, 20*time.Second), srv, "keepalive")
	lk.waitEnded(t, 10*time.Second)
	t.Logf("the remote kernel ended %.1fs after the peer went silent", time.Since(silent).Seconds())
}

// A connection lost while the host cannot be reached at all: Wait says the kernel could
// not be ended and why, and the kernel ends by itself at the stdin EOF its sshd's death
// gave it, within its EOF grace.
func TestLostConnectionToAnUnreachableHostSaysSo(t *testing.T) {
	srv := sshtest.Start(t)
	h := newHosts(t, srv)
	lk := startAsleepWith(t, srv, h, ssh.Options{Target: sshtest.Alias, EOFGrace: time.Second})
	// No new connection can be had: the listening sshd is gone (the session's child
	// lives on), then the session's child too.
	if err := testproc.Kill(srv.SSHDPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := testproc.Kill(lk.sshd, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := waitErr(t, lk.k, 30*time.Second)
	t.Logf("Wait: %v", err)
	checkNamesConnection(t, "Wait", err, srv, "connection lost")
	if !strings.Contains(err.Error(), "could not be ended") {
		t.Fatalf("Wait: %v; want it to say the remote kernel could not be ended", err)
	}
	lk.waitEnded(t, 10*time.Second)
}

// The default keepalive notices a silent peer within 15 s; the bound is the interval
// times the count, as resolved; bad options are refused.
func TestKeepAliveBound(t *testing.T) {
	for _, c := range []struct {
		opts ssh.HostsOptions
		want time.Duration
	}{
		{ssh.HostsOptions{}, 15 * time.Second},
		{ssh.HostsOptions{KeepAlive: 500 * time.Millisecond}, 1500 * time.Millisecond},
		{ssh.HostsOptions{KeepAlive: 2 * time.Second, KeepAliveCount: 5}, 10 * time.Second},
		{ssh.HostsOptions{KeepAlive: -1}, 0},
	} {
		c.opts.ConfigFile = "none"
		h, err := ssh.NewHosts(c.opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := h.KeepAliveTimeout(); got != c.want {
			t.Errorf("%+v: keepalive timeout %v, want %v", c.opts, got, c.want)
		}
		h.Close()
	}
	if h, _ := ssh.NewHosts(ssh.HostsOptions{ConfigFile: "none"}); h.KeepAliveTimeout() > 15*time.Second {
		t.Errorf("the default keepalive notices a silent peer after %v, over 15 s", h.KeepAliveTimeout())
	}
	if _, err := ssh.NewHosts(ssh.HostsOptions{ConfigFile: "none", KeepAliveCount: -1}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("a negative keepalive count: %v, want an invalid argument", err)
	}
}

// The control command signals the recorded kernel's group only while the process under
// the recorded pid has the recorded start time: a pid now held by another process (here
// a sleeper leading its own group, recorded with another start time) is never signalled.
func TestControlNeverSignalsAReusedPid(t *testing.T) {
	srv := sshtest.Start(t)
	h := newHosts(t, srv)
	sleeper := exec.Command("sleep", "1000")
	sleeper.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = sleeper.Wait(); close(exited) }()
	t.Cleanup(func() { _ = sleeper.Process.Kill(); <-exited })
	st, err := procfs.Read(sleeper.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	run := func(runID, record string, actions ...string) {
		t.Helper()
		dir := filepath.Join(srv.Home, ".kennel-remote", "run", runID)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(record), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, a := range actions {
			if _, err := ssh.Control(testCtx(t), h, sshtest.Alias, runID, a); err != nil {
				t.Fatalf("%s: %v", a, err)
			}
		}
	}
	pid := strconv.Itoa(st.PID)
	run("reused", pid+" "+strconv.FormatUint(st.Start+1, 10)+"\n", "TERM", "KILL", "CLEANUP")
	select {
	case <-exited:
		t.Fatal("the control command signalled a process whose start time is not the recorded one")
	case <-time.After(200 * time.Millisecond):
	}
	// The same process recorded with its own start time is the kernel: it is signalled.
	run("same", pid+" "+strconv.FormatUint(st.Start, 10)+"\n", "TERM")
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("TERM did not reach the recorded kernel's group")
	}
}
