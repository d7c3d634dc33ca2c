package images

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/testproc"
)

// TestDetachedExitsAfterTheGrace: with no connection attached for the last attach's
// grace and nothing live, the kernel exits 0, leaves no process in its group and removes
// its socket.
func TestDetachedExitsAfterTheGrace(t *testing.T) {
	t.Parallel()
	k := startDetached(t, detachedOpts{})
	c, _ := k.attach(0, 2)
	s := &stream{t: t}
	c.send(1, 0, hostFrame("execute", "c1", "code", "1"))
	s.until(c, isDone("c1"))
	c.c.Close()
	code, took := k.waitExit(2*time.Second + 8*time.Second)
	t.Logf("exited %v after the connection closed (grace 2s)", took)
	if code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
	eventually(t, "kernel group gone", func() bool { return groupGone(k.pid()) })
	if _, err := os.Lstat(filepath.Join(k.run, "kernel.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("kernel.sock after the exit: %v", err)
	}
}

// TestDetachedLiveJobHoldsTheGrace: a job still running keeps an unattached kernel past
// its grace; once the job ends the kernel exits, leaving neither its group nor the job's.
func TestDetachedLiveJobHoldsTheGrace(t *testing.T) {
	t.Parallel()
	k := startDetached(t, detachedOpts{})
	c, _ := k.attach(0, 0.2)
	s := &stream{t: t}
	c.send(1, 0, hostFrame("job_run", "j1", "command", "sleep 2"))
	start := s.until(c, func(f frame) bool { return f.Event == "job_start" })
	job := num(t, start.M["pid"])
	c.c.Close()
	// Whenever the job is seen alive after the kernel was looked at, the kernel must
	// have been alive when it was looked at.
	checked := 0
	for alive(job) {
		kernelUp := !k.exited()
		if alive(job) {
			checked++
			if !kernelUp {
				t.Fatal("the kernel exited while its job was live")
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("kernel seen up %d times while the job ran past the grace", checked)
	if code, _ := k.waitExit(wait); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
	eventually(t, "kernel and job groups gone", func() bool { return groupGone(k.pid()) && groupGone(job) })
}

// TestDetachedEndsWhenItsRunDirectoryGoes: removing the run directory ends the kernel
// at once, a running cell and a job notwithstanding; the job's group is ended too.
func TestDetachedEndsWhenItsRunDirectoryGoes(t *testing.T) {
	t.Parallel()
	k := startDetached(t, detachedOpts{})
	c, _ := k.attach(0, 600)
	s := &stream{t: t}
	c.send(1, 0, hostFrame("job_run", "j1", "command", "sleep 1000"))
	start := s.until(c, func(f frame) bool { return f.Event == "job_start" })
	job := num(t, start.M["pid"])
	c.send(2, 0, hostFrame("execute", "c1", "code", "import time\nprint('go')\ntime.sleep(100)"))
	s.until(c, func(f frame) bool { return f.Event == "stream" && f.ID == "c1" })
	if err := os.RemoveAll(k.run); err != nil {
		t.Fatal(err)
	}
	code, took := k.waitExit(5 * time.Second)
	t.Logf("exited %v after the run directory was removed", took)
	if code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
	eventually(t, "job group gone", func() bool { return groupGone(job) })
}

// TestDetachedSIGTERMExits143: SIGTERM ends a detached kernel as it ends a protocol 1
// one.
func TestDetachedSIGTERMExits143(t *testing.T) {
	t.Parallel()
	k := startDetached(t, detachedOpts{})
	c, _ := k.attach(0, 60)
	s := &stream{t: t}
	c.send(1, 0, hostFrame("execute", "c1", "code", "import time\nprint('go')\ntime.sleep(100)"))
	s.until(c, func(f frame) bool { return f.Event == "stream" && f.ID == "c1" })
	if err := testproc.Kill(k.pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, _ := k.waitExit(wait); code != 143 {
		t.Errorf("exit code = %d, want 143", code)
	}
}

// TestDetachedShutdownFrameEnds: a shutdown sent through the link ends the kernel
// (exit 0), and the frames it wrote before its exit reach the attached connection.
func TestDetachedShutdownFrameEnds(t *testing.T) {
	t.Parallel()
	k := startDetached(t, detachedOpts{})
	c, _ := k.attach(0, 60)
	s := &stream{t: t}
	c.send(1, 0, hostFrame("job_run", "j1", "command", "sleep 1000"))
	s.until(c, func(f frame) bool { return f.Event == "job_start" })
	c.send(2, 0, hostFrame("shutdown", ""))
	end := s.until(c, func(f frame) bool { return f.Event == "job_end" })
	if num(t, end.M["signal"]) != int(syscall.SIGTERM) {
		t.Errorf("job_end = %s", end)
	}
	if code, _ := k.waitExit(wait); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
}

// vmRSS reads VmRSS of pid in KiB.
func vmRSS(t testing.TB, pid int) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no VmRSS for %d", pid)
	return 0
}

// TestDetachedIdleRSS reports the resident size of an idle detached kernel beside a
// protocol 1 one (a measurement: it asserts nothing but that both run).
func TestDetachedIdleRSS(t *testing.T) {
	t.Parallel()
	k := startDetached(t, detachedOpts{env: []string{EnvSite + "=0"}})
	c, _ := k.attach(0, 60)
	s := &stream{t: t}
	c.send(1, 0, hostFrame("execute", "c1", "code", "1"))
	s.until(c, isDone("c1"))
	p1 := startKernel(t, kernelOpts{env: []string{EnvSite + "=0"}})
	p1.result("c1", "1")
	time.Sleep(300 * time.Millisecond)
	t.Logf("idle VmRSS: detached %d KiB, protocol 1 %d KiB", vmRSS(t, k.pid()), vmRSS(t, p1.cmd.Process.Pid))
}
