package local_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/internal/procfs"
	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/local"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// helperEnv puts the test binary in helper mode (see helper); its value is the mode.
const helperEnv = "KENNEL_LOCAL_TEST_HELPER"

// helper is a controller in a process of its own: mode "controller" starts a kernel,
// starts sleepers in it, prints "pids <kernel> <sleepers...>" and waits to be killed.
func helper(mode string) int {
	if mode != "controller" {
		fmt.Fprintln(os.Stderr, "helper: unknown mode", mode)
		return 2
	}
	tr := local.New(local.Options{
		CacheDir: os.Getenv("KENNEL_LOCAL_TEST_CACHE"),
		Python:   os.Getenv("KENNEL_LOCAL_TEST_PYTHON"),
	})
	dir, _ := os.Getwd()
	k, err := tr.Start(context.Background(), transports.Spec{SessionID: "helper", Dir: dir, Stderr: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	c := transporttest.NewClient(k)
	if _, err := c.Hello(); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	pids, err := c.Sleepers()
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	fmt.Printf("pids %d %d %d %d\n", k.Info().PID, pids[0], pids[1], pids[2])
	select {}
}

// proc names a process across pid reuse.
type proc struct {
	pid   int
	start string
	ppid  int
}

func procStat(pid int) (p proc, state string) {
	st, err := procfs.Read(pid)
	if err != nil {
		return proc{}, ""
	}
	return proc{pid: pid, start: strconv.FormatUint(st.Start, 10), ppid: st.PPID}, string(st.State)
}

func identify(t testing.TB, pid int) proc {
	t.Helper()
	p, state := procStat(pid)
	if p.pid == 0 || state == "Z" {
		t.Fatalf("process %d is not alive", pid)
	}
	return p
}

func (p proc) alive() bool {
	q, _ := procStat(p.pid)
	return q.pid != 0 && q.start == p.start
}

// eventuallyGone waits until every process is gone, failing the test after d.
func eventuallyGone(t *testing.T, d time.Duration, ps ...proc) {
	t.Helper()
	deadline := time.Now().Add(d)
	for _, p := range ps {
		for p.alive() {
			if time.Now().After(deadline) {
				t.Errorf("process %d is still alive", p.pid)
				_ = testproc.Kill(p.pid, syscall.SIGKILL)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func waitExit(t *testing.T, k transports.Kernel, d time.Duration) transports.Exit {
	t.Helper()
	ch := make(chan transports.Exit, 1)
	go func() {
		e, err := k.Wait()
		if err != nil {
			t.Errorf("wait: %v", err)
		}
		ch <- e
	}()
	select {
	case e := <-ch:
		return e
	case <-time.After(d):
		t.Fatalf("kernel did not end within %v", d)
	}
	return transports.Exit{}
}

// sleeperProcs runs the sleepers cell (Client.Sleepers) and identifies its processes.
func sleeperProcs(t *testing.T, c *transporttest.Client) []proc {
	t.Helper()
	pids, err := c.Sleepers()
	if err != nil {
		t.Fatal(err)
	}
	var ps []proc
	for _, pid := range pids {
		ps = append(ps, identify(t, pid))
	}
	return ps
}

// The kernel ends with its owner pid, here another process named by Options.OwnerPID;
// the reaper then ends the kernel's sleepers.
func TestOwnerDeathEndsTheKernel(t *testing.T) {
	owner := exec.Command("sleep", "1000")
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = owner.Process.Kill(); _ = owner.Wait() }()
	tr := local.New(local.Options{CacheDir: t.TempDir(), Python: needPython(t), OwnerPID: owner.Process.Pid,
		StdinGrace: 500 * time.Millisecond, TermGrace: 500 * time.Millisecond})
	k, c := transporttest.Start(t, tr, transports.Spec{})
	ps := append(sleeperProcs(t, c), identify(t, k.Info().PID))
	if out, err := c.Run("import os\nprint(os.environ['KENNEL_KERNEL_OWNER_PID'])"); err != nil || strings.TrimSpace(out) != strconv.Itoa(owner.Process.Pid) {
		t.Fatalf("owner pid in the kernel: %q, %v", out, err)
	}
	_ = owner.Process.Kill()
	_ = owner.Wait()
	e := waitExit(t, k, 30*time.Second)
	if e.Killed {
		t.Errorf("exit %+v: the kernel ended by itself, not by Kill", e)
	}
	eventuallyGone(t, time.Second, ps...)
}

// Without an override the owner is the controller (this process).
func TestOwnerIsTheControllerByDefault(t *testing.T) {
	_, c := transporttest.Start(t, newTransport(t), transports.Spec{})
	out, err := c.Run("import os\nprint(os.environ['KENNEL_KERNEL_OWNER_PID'])")
	if err != nil || strings.TrimSpace(out) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("owner pid in the kernel: %q, %v; want %d", out, err, os.Getpid())
	}
}

// A kernel that exits by itself (stdin EOF, or a cell calling os._exit) leaves nothing:
// the reaper kills the sleepers the stub does not know about.
func TestReaperEndsSleepersOfAKernelThatExitsByItself(t *testing.T) {
	for _, c := range []struct {
		name string
		end  func(k transports.Kernel, c *transporttest.Client) error
		want transports.Exit
	}{
		{"stdin EOF", func(k transports.Kernel, c *transporttest.Client) error { return k.Stdin().Close() }, transports.Exit{Code: 0}},
		{"os._exit(3)", func(k transports.Kernel, c *transporttest.Client) error {
			_, err := c.Send("import os\nos._exit(3)")
			return err
		}, transports.Exit{Code: 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			k, cl := transporttest.Start(t, newTransport(t), transports.Spec{})
			ps := sleeperProcs(t, cl)
			if err := c.end(k, cl); err != nil {
				t.Fatal(err)
			}
			if e := waitExit(t, k, 30*time.Second); e != c.want {
				t.Fatalf("exit %+v, want %+v", e, c.want)
			}
			for _, p := range ps {
				if p.alive() {
					t.Errorf("sleeper %d outlived the kernel", p.pid)
					_ = testproc.Kill(p.pid, syscall.SIGKILL)
				}
			}
		})
	}
}

// The controller is SIGKILLed: its reaper gets its parent-death signal and the kernel
// sees its owner gone; the kernel, its sleepers and the reaper all end.
func TestControllerDeathEndsEverything(t *testing.T) {
	p := needPython(t)
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(),
		helperEnv+"=controller",
		"KENNEL_LOCAL_TEST_PYTHON="+p,
		"KENNEL_LOCAL_TEST_CACHE="+t.TempDir())
	cmd.Dir = t.TempDir()
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %q, %v", line, err)
	}
	var ps []proc
	for _, f := range strings.Fields(strings.TrimPrefix(line, "pids ")) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("helper said %q", line)
		}
		ps = append(ps, identify(t, pid))
	}
	reaperPID := ps[0].ppid
	rp := identify(t, reaperPID)
	if rp.ppid != cmd.Process.Pid {
		t.Fatalf("kernel %d's parent %d is not a child of the helper %d", ps[0].pid, reaperPID, cmd.Process.Pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	eventuallyGone(t, 15*time.Second, append(ps, rp)...)
}

func TestStartRefusesBadSpecs(t *testing.T) {
	tr := newTransport(t)
	dir := t.TempDir()
	file := dir + "/file"
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		spec transports.Spec
		want error
	}{
		{"no session", transports.Spec{Dir: dir}, errdefs.ErrInvalidArgument},
		{"no dir", transports.Spec{SessionID: "s"}, errdefs.ErrInvalidArgument},
		{"relative dir", transports.Spec{SessionID: "s", Dir: "rel"}, errdefs.ErrInvalidArgument},
		{"missing dir", transports.Spec{SessionID: "s", Dir: dir + "/missing"}, os.ErrNotExist},
		{"dir is a file", transports.Spec{SessionID: "s", Dir: file}, errdefs.ErrInvalidArgument},
		{"env without =", transports.Spec{SessionID: "s", Dir: dir, Env: []string{"NOEQUALS"}}, errdefs.ErrInvalidArgument},
		{"env empty key", transports.Spec{SessionID: "s", Dir: dir, Env: []string{"=x"}}, errdefs.ErrInvalidArgument},
		{"env NUL", transports.Spec{SessionID: "s", Dir: dir, Env: []string{"A=b\x00c"}}, errdefs.ErrInvalidArgument},
		{"env owner pid", transports.Spec{SessionID: "s", Dir: dir, Env: []string{"KENNEL_KERNEL_OWNER_PID=1"}}, errdefs.ErrInvalidArgument},
		{"python an option", transports.Spec{SessionID: "s", Dir: dir, Python: "-c"}, errdefs.ErrInvalidArgument},
		{"missing python", transports.Spec{SessionID: "s", Dir: dir, Python: "/nonexistent/python3"}, transports.ErrUnavailable},
		{"python not on PATH", transports.Spec{SessionID: "s", Dir: dir, Python: "kennel-no-such-python"}, transports.ErrUnavailable},
	} {
		k, err := tr.Start(context.Background(), c.spec)
		if err == nil {
			transporttest.Stop(t, k)
			t.Errorf("%s: Start succeeded", c.name)
			continue
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// An executable that does not enter reaper mode is refused with a clear error, and
// nothing of it is left running.
func TestStartWithAnExecutableThatIsNoReaper(t *testing.T) {
	p := needPython(t)
	tr := local.New(local.Options{CacheDir: t.TempDir(), Python: p, Reaper: "/bin/true"})
	k, err := tr.Start(context.Background(), transports.Spec{SessionID: "s", Dir: t.TempDir()})
	if err == nil {
		transporttest.Stop(t, k)
		t.Fatal("Start succeeded")
	}
	if !strings.Contains(err.Error(), "reaper.Main") {
		t.Fatalf("error %q does not name the fix", err)
	}
}

// Kill returns with ctx's cause when ctx ends first, and the stages go on to the end.
func TestKillReturnsWhenItsContextEnds(t *testing.T) {
	p := needPython(t)
	tr := local.New(local.Options{CacheDir: t.TempDir(), Python: p, StdinGrace: 300 * time.Millisecond, TermGrace: 300 * time.Millisecond})
	k, c := transporttest.Start(t, tr, transports.Spec{})
	if _, err := c.Send("while True: pass"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := k.Kill(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Kill: %v, want context.DeadlineExceeded", err)
	}
	if e := waitExit(t, k, 30*time.Second); !e.Killed {
		t.Fatalf("exit %+v: want Killed", e)
	}
}

// The interpreter named by Options.Python is resolved once per Transport: a shim that
// counts its runs runs once however many kernels start.
func TestInterpreterIsResolvedOnce(t *testing.T) {
	p := needPython(t)
	dir := t.TempDir()
	count := dir + "/count"
	shim := dir + "/python-shim"
	script := fmt.Sprintf("#!/bin/sh\necho run >> %s\nexec %s \"$@\"\n", count, p)
	if err := os.WriteFile(shim, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	tr := local.New(local.Options{CacheDir: t.TempDir(), Python: shim})
	for range 3 {
		k, c := transporttest.Start(t, tr, transports.Spec{})
		out, err := c.Run("import sys\nprint(sys.executable)")
		if err != nil || strings.TrimSpace(out) != p {
			t.Fatalf("kernel runs %q, %v; want %s", out, err, p)
		}
		transporttest.Stop(t, k)
	}
	b, err := os.ReadFile(count)
	if err != nil || strings.Count(string(b), "run") != 1 {
		t.Fatalf("shim ran %q times (%v), want once", b, err)
	}
}

// Stdout reaches EOF after the end, and stays at EOF.
func TestStdoutEndsAfterTheKernel(t *testing.T) {
	tr := newTransport(t)
	k, err := tr.Start(context.Background(), transports.Spec{SessionID: "s", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	transporttest.Stop(t, k)
	buf := make([]byte, 1<<20)
	for {
		_, err := k.Stdout().Read(buf)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("read after the end: %v", err)
			}
			break
		}
	}
	if _, err := k.Stdout().Read(buf); !errors.Is(err, io.EOF) {
		t.Fatalf("second read after EOF: %v", err)
	}
	if _, err := k.Stdin().Write([]byte("{}\n")); err == nil {
		t.Fatalf("write to the stdin of an ended kernel succeeded")
	}
}
