package images

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kennel-dev/kennel/internal/procfs"
	"github.com/kennel-dev/kennel/internal/testproc"
)

// termBound is how long a kernel may take to end after SIGTERM. It proves "ended, not
// hung": the kernel needs about 1 s (its jobs' TERM-to-KILL grace); the defects these
// tests catch made it 30 s (the EOF grace) or forever.
const termBound = 10 * time.Second

// Jobs every SIGTERM test runs: one that ends at TERM and one that ignores it (its shell
// and its sleep must be KILLed).
const (
	jobSleeps      = "sleep 1000"
	jobIgnoresTERM = "trap '' TERM; echo ready; sleep 1000"
)

// liveInGroups lists the processes of the process groups pgids that have not ended
// (zombies, ended and waiting to be reaped, are not listed).
func liveInGroups(t testing.TB, pgids []int) []procfs.Stat {
	t.Helper()
	all, err := procfs.All()
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]bool{}
	for _, g := range pgids {
		want[g] = true
	}
	var live []procfs.Stat
	for _, st := range all {
		if want[st.PGRP] && !st.Zombie() {
			live = append(live, st)
		}
	}
	return live
}

// noneLeft fails the test unless every process of the groups pgids ends within wait.
func noneLeft(t testing.TB, pgids []int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		live := liveInGroups(t, pgids)
		if len(live) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of the kernel's jobs still run %v after it ended: %+v", wait, live)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// killGroupsAtCleanup SIGKILLs the groups pgids when the test ends, so a failing test
// leaves no job behind.
func killGroupsAtCleanup(t testing.TB, pgids *[]int) {
	t.Cleanup(func() {
		for _, g := range *pgids {
			testproc.KillGroup(g, syscall.SIGKILL)
		}
	})
}

// exitWithin waits up to d for the kernel to exit, reading (and checking) its frames
// meanwhile; it returns the exit code and how long the wait took.
func (k *kernel) exitWithin(d time.Duration) (int, time.Duration) {
	k.t.Helper()
	started := time.Now()
	timeout := time.After(d)
	for {
		select {
		case f, ok := <-k.frames:
			if !ok {
				<-k.done
				return exitCode(k.t, k.exit), time.Since(started)
			}
			if f.Err != nil {
				k.t.Errorf("bad frame: %v", f.Err)
			}
		case <-timeout:
			k.t.Fatalf("kernel did not exit within %v (of SIGTERM, or of the end the test began)", d)
		}
	}
}

func exitCode(t testing.TB, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	return 0
}

// startTermJobs starts the two jobs of every SIGTERM test and returns their groups once
// the one that ignores TERM has set its trap.
func (k *kernel) startTermJobs(pgids *[]int) {
	k.t.Helper()
	*pgids = append(*pgids, num(k.t, k.jobRun("j1", jobSleeps).M["pgid"]))
	*pgids = append(*pgids, num(k.t, k.jobRun("j2", jobIgnoresTERM).M["pgid"]))
	k.until(func(f frame) bool { return f.ID == "j2" && f.Event == "job_output" })
}

// TestSIGTERMEndsTheKernelAtOnceInEveryState sends SIGTERM to a kernel with a job that
// ends at TERM and one that ignores it, in each state the kernel can be in: it exits 143
// within about a second (the jobs' TERM-to-KILL grace), and no process of its jobs is left.
// A graceful end (stdin EOF, a shutdown frame) already under way must not swallow it.
func TestSIGTERMEndsTheKernelAtOnceInEveryState(t *testing.T) {
	t.Parallel()
	const (
		sleeping = "print('go')\nimport time\ntime.sleep(100)"
		busy     = "print('go')\nwhile True:\n    pass"
	)
	// The graceful end has begun once it TERMed j1: its job_end is the sign.
	j1Ended := func(k *kernel) {
		k.until(func(f frame) bool { return f.ID == "j1" && f.Event == "job_end" })
	}
	cases := []struct {
		name  string
		setup func(k *kernel)
	}{
		{"idle", func(k *kernel) {}},
		{"during a sleeping cell", func(k *kernel) { k.startCell("c1", sleeping) }},
		{"during a busy cell", func(k *kernel) { k.startCell("c1", busy) }},
		{"after stdin EOF, idle", func(k *kernel) { k.stdin.Close(); j1Ended(k) }},
		{"after stdin EOF, a sleeping cell holding it", func(k *kernel) {
			k.startCell("c1", sleeping)
			k.stdin.Close()
			j1Ended(k)
		}},
		{"after stdin EOF, a busy cell holding it", func(k *kernel) {
			k.startCell("c1", busy)
			k.stdin.Close()
			j1Ended(k)
		}},
		{"after a shutdown frame, idle", func(k *kernel) { k.send("shutdown", ""); j1Ended(k) }},
		{"after a shutdown frame, a sleeping cell holding it", func(k *kernel) {
			k.startCell("c1", sleeping)
			k.send("shutdown", "")
			j1Ended(k)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var pgids []int
			killGroupsAtCleanup(t, &pgids)
			k := startKernel(t, kernelOpts{})
			k.startTermJobs(&pgids)
			c.setup(k)
			if err := k.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			code, took := k.exitWithin(termBound)
			t.Logf("exit %d %v after SIGTERM", code, took)
			if code != 143 {
				t.Errorf("exit code = %d, want 143", code)
			}
			noneLeft(t, pgids)
		})
	}
}

// TestSIGTERMWhileStdoutIsFullAndUnread fills the frame channel (a cell prints and nobody
// reads), has a job_run arrive while it is full (its job_start cannot be written), then
// sends SIGTERM: the kernel still exits 143 and its jobs' processes are gone.
func TestSIGTERMWhileStdoutIsFullAndUnread(t *testing.T) {
	t.Parallel()
	python := needPython(t)
	b, dir := stubDir(t)
	argv := KernelArgv(python, dir)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), KernelEnv(b)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var pgids []int
	killGroupsAtCleanup(t, &pgids)
	t.Cleanup(func() {
		stdin.Close()
		testproc.KillGroup(cmd.Process.Pid, syscall.SIGKILL)
		cmd.Process.Kill()
		<-done
	})
	send := func(typ, id string, kv ...any) {
		t.Helper()
		if _, err := stdin.Write(hostFrame(typ, id, kv...)); err != nil {
			t.Fatalf("send %s %s: %v", typ, id, err)
		}
	}

	// Read up to j2's first output (its trap is set), then never read again.
	send("job_run", "j1", "command", jobSleeps)
	send("job_run", "j2", "command", jobIgnoresTERM)
	lines := bufio.NewReader(r)
	for ready := false; !ready; {
		line, err := lines.ReadBytes('\n')
		if err != nil {
			t.Fatalf("read frames: %v", err)
		}
		var f struct{ Event, ID string }
		if err := json.Unmarshal(line, &f); err != nil {
			t.Fatalf("frame %q: %v", line, err)
		}
		ready = f.Event == "job_output" && f.ID == "j2"
	}
	send("execute", "c1", "code", "while True:\n    print('x' * 65536)")
	capacity, err := unix.FcntlInt(r.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Full: at least half the pipe's capacity unread (pages are not filled to the byte),
	// and no more coming for 100 ms.
	last, same := -1, 0
	eventually(t, "the frame pipe is full", func() bool {
		n, err := unix.IoctlGetInt(int(r.Fd()), unix.TIOCINQ) // FIONREAD: bytes unread
		if err != nil || n < capacity/2 || n != last {
			last, same = n, 0
			return false
		}
		same++
		return same >= 10
	})

	// A job started now cannot announce itself: the kernel blocks writing its job_start.
	// (Whether the stub is in that write yet or about to be, the TERM must end it.)
	send("job_run", "j3", "command", jobSleeps)
	eventually(t, "j3 started", func() bool { return len(jobGroupsOf(t, cmd.Process.Pid)) == 3 })
	pgids = jobGroupsOf(t, cmd.Process.Pid)

	started := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		done <- err // for the cleanup
		code := exitCode(t, err)
		t.Logf("exit %d %v after SIGTERM", code, time.Since(started))
		if code != 143 {
			t.Errorf("exit code = %d, want 143", code)
		}
	case <-time.After(termBound):
		t.Fatalf("kernel with a full, unread stdout did not exit within %v of SIGTERM", termBound)
	}
	noneLeft(t, pgids)
}

// jobGroupsOf lists the process groups of pid's jobs, sorted: its live children that
// lead their own group (a job's shell is started in a new session).
func jobGroupsOf(t testing.TB, pid int) []int {
	t.Helper()
	all, err := procfs.All()
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, st := range all {
		if st.PPID == pid && st.PGRP == st.PID && !st.Zombie() {
			out = append(out, st.PID)
		}
	}
	sort.Ints(out)
	return out
}

// TestSIGTERMRightAfterTheHelloExits143 signals the kernel as soon as its hello is read,
// while it is still importing the rest of the stub: the TERM is kept, not lost or left to
// the default action, and the kernel exits 143.
func TestSIGTERMRightAfterTheHelloExits143(t *testing.T) {
	t.Parallel()
	for i := 0; i < 5; i++ {
		k := startKernel(t, kernelOpts{})
		if err := k.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code, took := k.exitWithin(termBound); code != 143 {
			t.Errorf("exit code = %d (%v after SIGTERM; -1: killed by the signal), want 143", code, took)
		}
	}
}

// TestSIGTERMAfterEOFDuringABusyCellUnderStress repeats the race of a graceful end (stdin
// EOF) with a SIGTERM that comes 0-300 ms after it, while a busy cell holds the main thread:
// every kernel exits 143 within termBound (the defect it guards against left one running
// until its EOF grace, 30 s, or the host's SIGKILL). Iterations alternate: the cell seen
// running before the EOF or not (the EOF may then come before it starts), and a job that
// ignores TERM or none (the two ends then both stop it). KENNEL_TEST_TERM_STRESS sets the
// number of iterations (default 50; -short runs 10).
func TestSIGTERMAfterEOFDuringABusyCellUnderStress(t *testing.T) {
	t.Parallel()
	n := 50
	if testing.Short() {
		n = 10
	}
	if s := os.Getenv("KENNEL_TEST_TERM_STRESS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("KENNEL_TEST_TERM_STRESS=%q is not a count", s)
		}
		n = v
	}
	const workers = 2
	const busy = "print('go')\nwhile True:\n    pass"
	var (
		mu      sync.Mutex
		slowest time.Duration
		pgids   []int
		failed  atomic.Bool
	)
	killGroupsAtCleanup(t, &pgids)
	iterations := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range iterations {
				if failed.Load() {
					continue // the rest are not run once one failed
				}
				if !t.Run(fmt.Sprintf("iteration %d", i), func(t *testing.T) {
					k := startKernel(t, kernelOpts{})
					if i%2 == 1 {
						start := k.jobRun("j1", jobIgnoresTERM)
						mu.Lock()
						pgids = append(pgids, num(t, start.M["pgid"]))
						mu.Unlock()
						k.until(func(f frame) bool { return f.ID == "j1" && f.Event == "job_output" })
					}
					if i%4 < 2 {
						k.startCell("c1", busy)
					} else {
						k.send("execute", "c1", "code", busy)
					}
					k.stdin.Close()
					time.Sleep(time.Duration(rand.IntN(301)) * time.Millisecond)
					if err := k.cmd.Process.Signal(syscall.SIGTERM); err != nil {
						t.Fatal(err)
					}
					code, took := k.exitWithin(termBound)
					t.Logf("exit %d %v after SIGTERM", code, took)
					mu.Lock()
					slowest = max(slowest, took)
					mu.Unlock()
					if code != 143 {
						t.Errorf("exit code = %d %v after SIGTERM, want 143", code, took)
					}
				}) {
					failed.Store(true)
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		iterations <- i
	}
	close(iterations)
	wg.Wait()
	t.Logf("%d iterations; slowest exit %v after SIGTERM", n, slowest)
}
