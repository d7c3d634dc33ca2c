package reaper

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/procfs"
	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testproc"
)

// helperEnv puts the test binary in helper mode: a controller that starts a reaper whose
// kernel writes to the helper's stdout, and then waits to be killed.
const helperEnv = "KENNEL_REAPER_TEST_HELPER"

func TestMain(m *testing.M) {
	if Main() {
		return
	}
	if script, ok := os.LookupEnv(helperEnv); ok {
		os.Exit(helper(script))
	}
	os.Exit(m.Run())
}

func helper(script string) int {
	os.Unsetenv(helperEnv)
	p, err := Start(context.Background(), Spec{
		Argv: []string{"/bin/sh", "-c", script}, Env: os.Environ(),
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	fmt.Printf("reaper %d\n", p.Pid())
	select {}
}

// kernel is a reaper started by a test, with the pipes to its kernel.
type kernel struct {
	*Process
	stdin *os.File
	out   *bufio.Reader
}

func startKernel(t *testing.T, s Spec, script string) *kernel {
	t.Helper()
	testneed.Tools(t, "sh", "sleep", "setsid")
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s.Argv = []string{"/bin/sh", "-c", script}
	if s.Env == nil {
		s.Env = os.Environ()
	}
	s.Stdin, s.Stdout = inR, outW
	if s.Stderr == nil {
		s.Stderr = os.Stderr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := Start(ctx, s)
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		t.Fatalf("start: %v", err)
	}
	k := &kernel{Process: p, stdin: inW, out: bufio.NewReader(outR)}
	t.Cleanup(func() {
		_ = p.Kill()
		waitOrFail(t, p)
		inW.Close()
		outR.Close()
	})
	return k
}

// line reads one line of the kernel's output, failing the test at EOF.
func (k *kernel) line(t *testing.T) string {
	t.Helper()
	s, err := k.out.ReadString('\n')
	if err != nil {
		t.Fatalf("read kernel output: %q, %v", s, err)
	}
	return strings.TrimSuffix(s, "\n")
}

// pids reads one line of space-separated pids and records each one's identity.
func (k *kernel) pids(t *testing.T) []proc {
	t.Helper()
	var out []proc
	for _, f := range strings.Fields(k.line(t)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("not a pid: %q", f)
		}
		out = append(out, identify(t, pid))
	}
	return out
}

// proc names a process across pid reuse.
type proc struct {
	pid   int
	start uint64
}

func identify(t testing.TB, pid int) proc {
	t.Helper()
	st, err := procfs.Read(pid)
	if err != nil {
		t.Fatalf("process %d is not alive: %v", pid, err)
	}
	return proc{pid: pid, start: st.Start}
}

// alive reports whether p still exists (a zombie counts: it is not reaped).
func (p proc) alive() bool {
	st, err := procfs.Read(p.pid)
	return err == nil && st.Start == p.start
}

func waitOrFail(t testing.TB, p *Process) (Status, error) {
	t.Helper()
	select {
	case <-p.Done():
		return p.Wait()
	case <-time.After(20 * time.Second):
		t.Fatalf("%v did not end", p)
		return Status{}, nil
	}
}

// assertGone fails unless every process is gone by the time the reaper was reaped.
func assertGone(t *testing.T, ps ...proc) {
	t.Helper()
	for _, p := range ps {
		if p.alive() {
			t.Errorf("process %d survived", p.pid)
			_ = testproc.Kill(p.pid, syscall.SIGKILL)
		}
	}
}

func TestExitCodeAndSignalReported(t *testing.T) {
	for _, c := range []struct {
		script string
		want   Status
	}{
		{"exit 0", Status{Code: 0}},
		{"exit 3", Status{Code: 3}},
		{"kill -KILL $$", Status{Code: -1, Signal: syscall.SIGKILL}},
		{"kill -SEGV $$", Status{Code: -1, Signal: syscall.SIGSEGV}},
	} {
		k := startKernel(t, Spec{}, c.script)
		got, err := waitOrFail(t, k.Process)
		if err != nil || got != c.want {
			t.Errorf("%q: got %v, %v; want %v", c.script, got, err, c.want)
		}
		if code := k.cmd.ProcessState.ExitCode(); code != c.want.exitCode() {
			t.Errorf("%q: reaper exited %d, want %d", c.script, code, c.want.exitCode())
		}
	}
}

func TestKernelSharesTheFramePipes(t *testing.T) {
	k := startKernel(t, Spec{}, "echo pid $$; exec cat")
	if got, want := k.line(t), fmt.Sprintf("pid %d", k.KernelPID()); got != want {
		t.Fatalf("kernel says %q, want %q", got, want)
	}
	if _, err := io.WriteString(k.stdin, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if got := k.line(t); got != "ping" {
		t.Fatalf("echo: %q", got)
	}
	k.stdin.Close()
	if st, err := waitOrFail(t, k.Process); err != nil || st != (Status{}) {
		t.Fatalf("after stdin EOF: %v, %v", st, err)
	}
	// The reaper let go of its copy of stdout: EOF once the kernel is gone.
	if rest, err := io.ReadAll(k.out); err != nil || len(rest) != 0 {
		t.Fatalf("after the end: %q, %v", rest, err)
	}
}

func TestKernelRunsInItsOwnGroupWithTheGivenEnvAndDir(t *testing.T) {
	dir := t.TempDir()
	env := append(os.Environ(), "KENNEL_REAPER_TEST_X=x42")
	k := startKernel(t, Spec{Dir: dir, Env: env},
		`echo "$KENNEL_REAPER_TEST_X|${KENNEL_REAPER-unset}|$(pwd)"; exec cat`)
	if got, want := k.line(t), "x42|unset|"+dir; got != want {
		t.Fatalf("kernel says %q, want %q", got, want)
	}
	st, err := procfs.Read(k.KernelPID())
	if err != nil || st.PGRP != k.KernelPID() || st.PPID != k.Pid() {
		t.Fatalf("kernel stat %+v, %v: want its own group under reaper %d", st, err, k.Pid())
	}
	rs, err := procfs.Read(k.Pid())
	if err != nil || rs.PGRP != k.Pid() {
		t.Fatalf("reaper stat %+v, %v: want its own group", rs, err)
	}
}

// descendants is a script fragment that starts three sleepers that leave the kernel's
// tree in different ways and prints their pids on one line: a plain child, one in a new
// session, and an orphan of a double fork (reparented to the reaper at once).
const descendants = `sleep 1000 & a=$!; setsid sleep 1000 & b=$!; c=$(sh -c 'sleep 1000 >/dev/null 2>&1 & echo $!'); echo "$a $b $c"; `

func TestDescendantsDieWhenTheKernelExits(t *testing.T) {
	k := startKernel(t, Spec{}, descendants+"read x; exit 4")
	ps := k.pids(t)
	k.stdin.Close()
	st, err := waitOrFail(t, k.Process)
	if err != nil || st != (Status{Code: 4}) {
		t.Fatalf("got %v, %v; want exit 4", st, err)
	}
	assertGone(t, ps...)
}

func TestTerminateForwardsTERM(t *testing.T) {
	k := startKernel(t, Spec{}, `trap 'exit 7' TERM; `+descendants+`wait`)
	ps := k.pids(t)
	if err := k.Terminate(); err != nil {
		t.Fatal(err)
	}
	st, err := waitOrFail(t, k.Process)
	if err != nil || st != (Status{Code: 7}) {
		t.Fatalf("got %v, %v; want exit 7 from the kernel's TERM trap", st, err)
	}
	assertGone(t, ps...)
}

func TestTerminateKillsHardAfterTheGrace(t *testing.T) {
	k := startKernel(t, Spec{Grace: 100 * time.Millisecond}, `trap '' TERM; `+descendants+`wait; wait; wait; sleep 1000`)
	ps := append(k.pids(t), identify(t, k.KernelPID()))
	if err := k.Terminate(); err != nil {
		t.Fatal(err)
	}
	st, err := waitOrFail(t, k.Process)
	if err != nil || st != (Status{Code: -1, Signal: syscall.SIGKILL}) {
		t.Fatalf("got %v, %v; want SIGKILL", st, err)
	}
	assertGone(t, ps...)
}

func TestKillEndsEverythingAtOnce(t *testing.T) {
	k := startKernel(t, Spec{Grace: time.Hour}, descendants+`exec sleep 1000`)
	ps := append(k.pids(t), identify(t, k.KernelPID()))
	if err := k.Kill(); err != nil {
		t.Fatal(err)
	}
	st, err := waitOrFail(t, k.Process)
	if err != nil || st != (Status{Code: -1, Signal: syscall.SIGKILL}) {
		t.Fatalf("got %v, %v; want SIGKILL", st, err)
	}
	assertGone(t, ps...)
	// Signals after the end are no error.
	if err := k.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := k.Terminate(); err != nil {
		t.Fatal(err)
	}
	if st2, err2 := k.Wait(); st2 != st || err2 != nil {
		t.Fatalf("second Wait: %v, %v", st2, err2)
	}
}

func TestOrphansAreReapedWhileTheKernelRuns(t *testing.T) {
	k := startKernel(t, Spec{}, `for i in 1 2 3 4 5 6 7 8 9 10; do (true &); done; echo ok; exec cat`)
	k.line(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		kids, err := children(k.Pid())
		if err != nil {
			t.Fatal(err)
		}
		zombies := 0
		for _, c := range kids {
			if c.Zombie() {
				zombies++
			}
		}
		if zombies == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reaper %d keeps %d zombie children", k.Pid(), zombies)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStartFailuresLeaveNothing(t *testing.T) {
	truePath := testneed.Tool(t, "true")
	before := childPIDs(t)
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	defer func() { inR.Close(); inW.Close(); outR.Close(); outW.Close() }()
	base := Spec{Stdin: inR, Stdout: outW, Env: os.Environ()}

	s := base
	s.Argv = []string{"/nonexistent/python3"}
	_, err := Start(context.Background(), s)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing kernel: %v, want fs.ErrNotExist", err)
	}

	s = base
	s.Argv, s.Path = []string{"/bin/sh"}, truePath
	_, err = Start(context.Background(), s)
	if !errors.Is(err, ErrHandshake) {
		t.Errorf("executable that is no reaper: %v, want ErrHandshake", err)
	}

	s = base
	s.Argv, s.Dir = []string{"/bin/sh"}, "/nonexistent/dir"
	_, err = Start(context.Background(), s)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing dir: %v, want fs.ErrNotExist", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s = base
	s.Argv = []string{"/bin/sh"}
	_, err = Start(ctx, s)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled ctx: %v, want context.Canceled", err)
	}

	for _, s := range []Spec{{}, {Argv: []string{"/bin/sh"}}} {
		if _, err := Start(context.Background(), s); !errors.Is(err, ErrConfig) {
			t.Errorf("Start(%+v): %v, want ErrConfig", s, err)
		}
	}
	if after := childPIDs(t); len(after) > len(before) {
		t.Fatalf("children left behind: before %v, after %v", before, after)
	}
}

func childPIDs(t *testing.T) []int {
	t.Helper()
	kids, err := children(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, k := range kids {
		out = append(out, k.PID)
	}
	return out
}

// A Go thread that exits (a goroutine that returns while locked to its thread) must not be
// taken for the controller's death: the reaper was forked from a thread held until it ends.
func TestThreadExitsDoNotEndTheKernel(t *testing.T) {
	k := startKernel(t, Spec{}, "exec cat")
	for range 64 {
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread() // never unlocked: the runtime ends this thread
		}()
		<-done
	}
	if _, err := io.WriteString(k.stdin, "still here\n"); err != nil {
		t.Fatal(err)
	}
	if got := k.line(t); got != "still here" {
		t.Fatalf("got %q", got)
	}
	select {
	case <-k.Done():
		t.Fatal("reaper ended")
	default:
	}
}

// The controller is SIGKILLed: its reaper gets SIGTERM (parent-death signal), forwards it,
// and kills the kernel's whole tree, the setsid'd and double-forked sleepers too.
func TestControllerDeathEndsTheTree(t *testing.T) {
	testneed.Tools(t, "sh", "sleep", "setsid")
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=echo $$; "+descendants+"trap '' TERM; while :; do sleep 1; done")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	r := bufio.NewReader(out)
	var ps []proc
	for range 3 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("helper: %q, %v", line, err)
		}
		for _, f := range strings.Fields(line) {
			if pid, err := strconv.Atoi(f); err == nil {
				ps = append(ps, identify(t, pid))
			}
		}
	}
	if len(ps) != 5 {
		t.Fatalf("want kernel, 3 sleepers and the reaper, got %v", ps)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(15 * time.Second)
	for _, p := range ps {
		for p.alive() {
			if time.Now().After(deadline) {
				t.Fatalf("process %d outlived its controller", p.pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// Done is closed once the reaper has been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// String names the process for logs: "reaper 12 (kernel 13)".
func (p *Process) String() string {
	return "reaper " + strconv.Itoa(p.Pid()) + " (kernel " + strconv.Itoa(p.kernelPID) + ")"
}
