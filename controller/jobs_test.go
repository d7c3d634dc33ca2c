package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/internal/procfs"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/output"
	"github.com/kennel-dev/kennel/protocol"
	"github.com/kennel-dev/kennel/transports/wrapped"
	"github.com/kennel-dev/kennel/transports/wrapped/wrappedtest"
	"pgregory.net/rapid"
)

// startJobSession starts a local session whose state dir is private to the test.
func startJobSession(t *testing.T, opts controller.Options) *controller.Session {
	t.Helper()
	if opts.StateDir == "" {
		opts.StateDir = filepath.Join(t.TempDir(), "state")
	}
	return startSession(t, opts)
}

func runJob(t *testing.T, s *controller.Session, command string, opts controller.JobOptions) *jobs.Job {
	t.Helper()
	j, err := s.RunJob(context.Background(), command, opts)
	if err != nil {
		t.Fatalf("run job %q: %v", command, err)
	}
	return j
}

// settle waits for job id up to budget and fails the test unless it settled.
func settle(t *testing.T, s *controller.Session, id jobs.ID, budget time.Duration) (jobs.Settled, controller.JobWait) {
	t.Helper()
	w, err := s.WaitJob(context.Background(), id, budget)
	if err != nil {
		t.Fatalf("wait %s: %v", id, err)
	}
	st, ok := w.Outcome.(jobs.Settled)
	if !ok {
		t.Fatalf("job %s did not settle within %v: %#v", id, budget, w.Outcome)
	}
	return st, w
}

// waitPID waits for the job's job_start.
func waitPID(t *testing.T, j *jobs.Job) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if pid, ok := j.PID(); ok {
			return pid
		}
	}
	t.Fatalf("job %s has no pid", j.ID())
	return 0
}

// groupMembers lists the processes of group pgid, zombies included, from /proc.
func groupMembers(t *testing.T, pgid int) []int {
	t.Helper()
	all, err := procfs.All()
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, st := range all {
		if st.PGRP == pgid {
			pids = append(pids, st.PID)
		}
	}
	return pids
}

func waitGroupSize(t *testing.T, pgid, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if len(groupMembers(t, pgid)) >= n {
			return
		}
	}
	t.Fatalf("group %d has %v, want %d processes", pgid, groupMembers(t, pgid), n)
}

// waitGroupGone waits until no process of group pgid remains, not even a zombie.
func waitGroupGone(t *testing.T, pgid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if len(groupMembers(t, pgid)) == 0 {
			return
		}
	}
	t.Fatalf("processes of group %d remain: %v", pgid, groupMembers(t, pgid))
}

func readAll(t *testing.T, c *output.Capture) []byte {
	t.Helper()
	var all []byte
	for off := int64(0); ; {
		p, err := c.ReadPage(off, output.MaxPage)
		if err != nil {
			t.Fatalf("read page at %d: %v", off, err)
		}
		all = append(all, p.Data...)
		off += int64(len(p.Data))
		if p.EOF {
			return all
		}
	}
}

func TestAShellJobStreamsItsExactBytesAndEndsOnce(t *testing.T) {
	s := startJobSession(t, controller.Options{})
	// "é" (c3 a9) is split across two writes, and so across two job_output frames.
	j := runJob(t, s, `printf 'a\303'; sleep 0.2; printf '\251b\n'; printf '\377\000raw\n'; exit 3`, controller.JobOptions{})
	st, w := settle(t, s, j.ID(), 30*time.Second)
	if st.End.ExitCode == nil || *st.End.ExitCode != 3 || st.End.Killed || w.Err != nil {
		t.Fatalf("end %v, err %v; want exit 3", st.End, w.Err)
	}
	want := "a\u00e9b\n\xff\x00raw\n"
	if got := readAll(t, j.Capture()); string(got) != want {
		t.Fatalf("capture %q, want %q", got, want)
	}
	if string(st.Output.Kept) != want || st.Output.Truncated() {
		t.Fatalf("reported %q (%+v)", st.Output.Kept, st.Output)
	}
	if l := j.Late(); l != (jobs.Late{}) {
		t.Fatalf("late events %+v", l)
	}
	if err := s.KillJob(context.Background(), j.ID()); !errors.Is(err, jobs.ErrEnded) {
		t.Fatalf("kill of an ended job: %v, want jobs.ErrEnded", err)
	}
}

func TestRunJobRefusesBadInputAndStartsNothing(t *testing.T) {
	s := startJobSession(t, controller.Options{})
	bad := output.On(output.Limits{Bytes: -1})
	for _, tc := range []struct {
		command string
		opts    controller.JobOptions
		want    error
	}{
		{"echo \x00", controller.JobOptions{}, controller.ErrInvalidCommand},
		{"echo \xff", controller.JobOptions{}, controller.ErrInvalidCommand},
		{strings.Repeat("x", controller.MaxCommandBytes+1), controller.JobOptions{}, controller.ErrInvalidCommand},
		{"true", controller.JobOptions{Truncation: &bad}, output.ErrInvalidLimits},
	} {
		if _, err := s.RunJob(context.Background(), tc.command, tc.opts); !errors.Is(err, tc.want) {
			t.Errorf("RunJob(%.20q) = %v, want %v", tc.command, err, tc.want)
		}
	}
	for _, id := range []jobs.ID{1, 99} {
		if _, err := s.WaitJob(context.Background(), id, 0); !errors.Is(err, controller.ErrNoJob) {
			t.Errorf("WaitJob(%s) = %v, want ErrNoJob", id, err)
		}
		if err := s.KillJob(context.Background(), id); !errors.Is(err, controller.ErrNoJob) {
			t.Errorf("KillJob(%s) = %v, want ErrNoJob", id, err)
		}
		if _, err := s.SaveOutput(context.Background(), id); !errors.Is(err, controller.ErrNoJob) {
			t.Errorf("SaveOutput(%s) = %v, want ErrNoJob", id, err)
		}
	}
	// Nothing was started: the next job is the first.
	if j := runJob(t, s, "true", controller.JobOptions{}); j.ID() != 1 {
		t.Fatalf("first job after refusals is %s", j.ID())
	}
}

// TestAJobNobodyReadsStillFinishes holds every reader away while a job writes 100 MiB:
// the controller drains the kernel regardless, so the job ends by itself.
func TestAJobNobodyReadsStillFinishes(t *testing.T) {
	s := startJobSession(t, controller.Options{})
	j := runJob(t, s, "head -c 100M /dev/zero", controller.JobOptions{})
	select {
	case <-j.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("job not done after 10 s with no reader; %d bytes seen", j.Capture().Stat().Seen)
	}
	st, _ := settle(t, s, j.ID(), time.Second)
	if st.End.ExitCode == nil || *st.End.ExitCode != 0 || st.Output.TotalBytes != 100<<20 {
		t.Fatalf("end %v, %d bytes", st.End, st.Output.TotalBytes)
	}
}

// TestAGiBJobKeepsTheControllerSmall runs `yes | head -c 1G`: the controller's heap stays
// under 64 MiB, the notice counts every byte, and the first and last pages read back.
func TestAGiBJobKeepsTheControllerSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 1 GiB through a kernel")
	}
	s := startJobSession(t, controller.Options{})
	runtime.GC()
	var maxHeap uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			maxHeap = max(maxHeap, ms.HeapInuse)
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	j := runJob(t, s, "yes | head -c 1G", controller.JobOptions{})
	st, w := settle(t, s, j.ID(), 5*time.Minute)
	close(stop)
	wg.Wait()
	t.Logf("max HeapInuse %.1f MiB", float64(maxHeap)/(1<<20))
	if maxHeap >= 64<<20 {
		t.Errorf("heap in use reached %d bytes, want < 64 MiB", maxHeap)
	}
	const total = 1 << 30
	r := st.Output
	if st.End.ExitCode == nil || *st.End.ExitCode != 0 || w.Err != nil {
		t.Fatalf("end %v, %v", st.End, w.Err)
	}
	if r.TotalBytes != total || r.KeptBytes+r.DroppedBytes != total || r.TotalLines != total/2 || r.KeptLines+r.DroppedLines != total/2 {
		t.Fatalf("counts do not add up to 1 GiB: %+v", r)
	}
	notice := r.Notice()
	if !strings.Contains(notice, fmt.Sprintf("of %d bytes", total)) || !strings.Contains(notice, fmt.Sprintf("dropped %d bytes", r.DroppedBytes)) || !strings.Contains(notice, "job "+j.ID().String()) {
		t.Fatalf("notice %q", notice)
	}
	page := bytes.Repeat([]byte("y\n"), output.MaxPage/2)
	first, err := j.Capture().ReadPage(0, output.MaxPage)
	if err != nil || !bytes.Equal(first.Data, page) {
		t.Fatalf("first page: %v, %d bytes", err, len(first.Data))
	}
	last, err := j.Capture().ReadPage(total-output.MaxPage, output.MaxPage)
	if err != nil || !bytes.Equal(last.Data, page) || !last.EOF {
		t.Fatalf("last page: %v, %d bytes, EOF %v", err, len(last.Data), last.EOF)
	}
	var re *output.ReadError
	if _, err := j.Capture().ReadPage(output.DefaultSpillLimit, output.MaxPage); !errors.As(err, &re) || !errors.Is(err, output.ErrLost) || re.Use == nil {
		t.Fatalf("read past the spill cap: %v, want a *ReadError ErrLost naming a read that works", err)
	}
}

// TestAReadPastTheSpillCapIsRefusedAndSavesAreAtomic reads a 20 MiB job's output around
// its 16 MiB spill cap, and saves a running and an ended job.
func TestAReadPastTheSpillCapIsRefusedAndSavesAreAtomic(t *testing.T) {
	s := startJobSession(t, controller.Options{})
	ctx := context.Background()

	running := runJob(t, s, "echo started; exec sleep 1000", controller.JobOptions{})
	dest := filepath.Join(t.TempDir(), "out")
	if _, err := running.Capture().Save(ctx, dest); !errors.Is(err, output.ErrRunning) {
		t.Fatalf("save of a running job: %v, want output.ErrRunning", err)
	}
	if _, err := os.Lstat(dest); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused save left %s: %v", dest, err)
	}
	if _, err := s.SaveOutput(ctx, running.ID()); !errors.Is(err, output.ErrRunning) {
		t.Fatalf("SaveOutput of a running job: %v, want output.ErrRunning", err)
	}

	const n = 20 << 20
	big := runJob(t, s, "head -c 20M /dev/zero", controller.JobOptions{})
	settle(t, s, big.ID(), time.Minute)
	c := big.Capture()
	if st := c.Stat(); st.Seen != n || st.Retained != output.DefaultSpillLimit || st.Complete {
		t.Fatalf("capture %+v", st)
	}
	zeros := make([]byte, output.MaxPage)
	for _, off := range []int64{0, output.DefaultSpillLimit - output.MaxPage, n - output.MaxPage} {
		p, err := c.ReadPage(off, output.MaxPage)
		if err != nil || !bytes.Equal(p.Data, zeros) {
			t.Fatalf("page at %d: %v, %d bytes", off, err, len(p.Data))
		}
	}
	var re *output.ReadError
	for _, off := range []int64{output.DefaultSpillLimit - 1, output.DefaultSpillLimit, 18 << 20} {
		if _, err := c.ReadPage(off, output.MaxPage); !errors.As(err, &re) || !errors.Is(err, output.ErrLost) || re.Use == nil {
			t.Fatalf("read at %d past the spill cap: %v, want a *ReadError ErrLost naming a read that works", off, err)
		}
	}
	if _, err := c.ReadPage(0, output.MaxPage+1); !errors.Is(err, output.ErrPageTooLarge) {
		t.Fatalf("an oversized page: %v, want output.ErrPageTooLarge", err)
	}
	before, _ := os.ReadDir(s.OutputDir())
	if _, err := s.SaveOutput(ctx, big.ID()); !errors.Is(err, output.ErrLost) {
		t.Fatalf("save of lost output: %v, want output.ErrLost", err)
	}
	if after, _ := os.ReadDir(s.OutputDir()); len(after) != len(before) {
		t.Fatalf("a refused save left files: %d before, %d after", len(before), len(after))
	}

	if err := s.KillJob(ctx, running.ID()); err != nil {
		t.Fatal(err)
	}
	settle(t, s, running.ID(), 30*time.Second)
	path, err := s.SaveOutput(ctx, running.ID())
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if b, _ := os.ReadFile(path); err != nil || string(b) != "started\n" || fi.Mode().Perm() != 0o600 || filepath.Dir(path) != s.OutputDir() {
		t.Fatalf("saved %s: %q, %v, %v", path, b, fi.Mode(), err)
	}
}

func TestTruncationBoundsWhatAJobReports(t *testing.T) {
	s := startJobSession(t, controller.Options{})
	var all strings.Builder
	for i := 1; i <= 5000; i++ {
		fmt.Fprintf(&all, "%d\n", i)
	}
	seq := "seq 1 5000"

	st, _ := settle(t, s, runJob(t, s, seq, controller.JobOptions{}).ID(), 30*time.Second)
	r := st.Output
	if r.KeptLines != 2000 || r.DroppedLines != 3000 || !strings.HasPrefix(all.String(), string(r.Kept)) || r.TotalBytes != int64(all.Len()) {
		t.Fatalf("default truncation: %+v", r)
	}
	if n := r.Notice(); !strings.Contains(n, "dropped "+strconv.FormatInt(r.DroppedBytes, 10)+" bytes (3000 lines)") || !strings.Contains(n, "job "+st.ID.String()) {
		t.Fatalf("notice %q", n)
	}
	path, err := s.SaveOutput(context.Background(), st.ID)
	if b, _ := os.ReadFile(path); err != nil || string(b) != all.String() {
		t.Fatalf("saved full output: %v, %d bytes", err, len(b))
	}

	off := output.Off()
	st, _ = settle(t, s, runJob(t, s, seq, controller.JobOptions{Truncation: &off}).ID(), 30*time.Second)
	if string(st.Output.Kept) != all.String() || st.Output.Truncated() || st.Output.Notice() != "" {
		t.Fatalf("Off dropped output: %+v", st.Output)
	}

	tail := output.On(output.Limits{Lines: 3, Keep: output.Tail})
	st, _ = settle(t, s, runJob(t, s, seq, controller.JobOptions{Truncation: &tail}).ID(), 30*time.Second)
	if string(st.Output.Kept) != "4998\n4999\n5000\n" {
		t.Fatalf("tail kept %q", st.Output.Kept)
	}

	s2 := startJobSession(t, controller.Options{Truncation: output.On(output.Limits{Lines: 10})})
	st, _ = settle(t, s2, runJob(t, s2, seq, controller.JobOptions{}).ID(), 30*time.Second)
	if st.Output.KeptLines != 10 || st.Output.DroppedLines != 4990 {
		t.Fatalf("session truncation: %+v", st.Output)
	}
}

// TestKillingAJobThatClosedItsOutputKillsItsWholeGroup kills a job whose processes closed
// stdout and stderr: every process of its group is gone, and it ends once.
func TestKillingAJobThatClosedItsOutputKillsItsWholeGroup(t *testing.T) {
	s := startJobSession(t, controller.Options{})
	j := runJob(t, s, "exec >&- 2>&-; sleep 1000 & exec sleep 1000", controller.JobOptions{})
	pgid := waitPID(t, j)
	waitGroupSize(t, pgid, 2)
	if w, _ := s.WaitJob(context.Background(), j.ID(), 200*time.Millisecond); w.Outcome == nil {
		t.Fatal("no outcome")
	} else if _, ok := w.Outcome.(jobs.Detached); !ok {
		t.Fatalf("a sleeping job settled: %#v", w.Outcome)
	}
	if err := s.KillJob(context.Background(), j.ID()); err != nil {
		t.Fatal(err)
	}
	st, w := settle(t, s, j.ID(), 30*time.Second)
	if st.End.Signal != int(syscall.SIGTERM) || !st.End.Killed || w.Err != nil {
		t.Fatalf("end %v, err %v; want SIGTERM, killed", st.End, w.Err)
	}
	waitGroupGone(t, pgid)
	time.Sleep(100 * time.Millisecond) // a second end, were there one, would be in by now
	if l := j.Late(); l.Ends != 0 {
		t.Fatalf("second end: %+v", l)
	}
	if o := s.Jobs().Observe(); o.LiveJobCount != 0 {
		t.Fatalf("live jobs after the kill: %+v", o)
	}
}

// TestAWedgedKernelsJobIsKilledByTheController stops the kernel (SIGSTOP) so it cannot
// act on the kill: the controller kills the job's group itself and ends the job.
func TestAWedgedKernelsJobIsKilledByTheController(t *testing.T) {
	s := startJobSession(t, controller.Options{JobKillGrace: 200 * time.Millisecond})
	_, info, _ := s.Kernel()
	j := runJob(t, s, "exec sleep 1000", controller.JobOptions{})
	pgid := waitPID(t, j)
	if err := syscall.Kill(info.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(info.PID, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	if err := s.KillJob(context.Background(), j.ID()); err != nil {
		t.Fatal(err)
	}
	st, w := settle(t, s, j.ID(), 30*time.Second)
	if !errors.Is(w.Err, controller.ErrEndedByController) || st.End.Signal != int(syscall.SIGKILL) || !st.End.Killed {
		t.Fatalf("end %v, err %v; want SIGKILL, killed, ErrEndedByController", st.End, w.Err)
	}
	for _, pid := range groupMembers(t, pgid) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); !strings.Contains(string(b), ") Z ") {
			t.Fatalf("process %d of the group is alive: %s", pid, b)
		}
	}
	resume()
	waitGroupGone(t, pgid)
	// The kernel's own job_end arrives late and is ignored.
	for deadline := time.Now().Add(10 * time.Second); j.Late().Ends == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the kernel's job_end never arrived")
		}
	}
	if end, _ := j.End(); end.Signal != int(syscall.SIGKILL) {
		t.Fatalf("the late end replaced the first: %v", end)
	}
}

func TestAJobEndsWhenItsKernelEnds(t *testing.T) {
	s := startJobSession(t, controller.Options{})
	_, info, _ := s.Kernel()
	j := runJob(t, s, "exec sleep 1000", controller.JobOptions{})
	pgid := waitPID(t, j)
	if err := syscall.Kill(info.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st, w := settle(t, s, j.ID(), 30*time.Second)
	if !errors.Is(w.Err, controller.ErrKernelExited) || st.End.ExitCode != nil || st.End.Signal != 0 {
		t.Fatalf("end %v, err %v; want unknown, ErrKernelExited", st.End, w.Err)
	}
	waitGroupGone(t, pgid) // the transport ends what its kernel started

	// The next job runs in a fresh kernel; closing the session ends it.
	j2 := runJob(t, s, "exec sleep 1000", controller.JobOptions{})
	waitPID(t, j2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, w := settle(t, s, j2.ID(), 10*time.Second); !errors.Is(w.Err, controller.ErrClosed) {
		t.Fatalf("job of a closed session: %v, want ErrClosed", w.Err)
	}
	if _, err := s.RunJob(ctx, "true", controller.JobOptions{}); !errors.Is(err, controller.ErrClosed) {
		t.Fatalf("RunJob after Close: %v, want ErrClosed", err)
	}
}

// TestAWaitReturnsByItsDeadline: `sleep 5` with a 200 ms budget detaches, a passed
// deadline detaches at once, and a second wait settles once the job ends.
func TestAWaitReturnsByItsDeadline(t *testing.T) {
	t.Parallel()
	s := startJobSession(t, controller.Options{})
	j := runJob(t, s, "sleep 5", controller.JobOptions{})
	start := time.Now()
	w, err := s.WaitJob(context.Background(), j.ID(), 200*time.Millisecond)
	elapsed := time.Since(start)
	if d, ok := w.Outcome.(jobs.Detached); err != nil || !ok || d.ID != j.ID() || d.Err != nil {
		t.Fatalf("wait with a 200 ms budget = %#v, %v; want Detached", w.Outcome, err)
	}
	if elapsed < 200*time.Millisecond || elapsed > 3*time.Second {
		t.Fatalf("a 200 ms wait returned after %v", elapsed)
	}
	if w, _ := s.WaitJob(context.Background(), j.ID(), 0); !isDetached(w) {
		t.Fatalf("a passed deadline did not detach: %#v", w.Outcome)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if w, _ := s.WaitJob(ctx, j.ID(), time.Minute); !isDetached(w) || w.Outcome.(jobs.Detached).Err == nil {
		t.Fatalf("a cancelled wait: %#v, want Detached with the cause", w.Outcome)
	}
	st, _ := settle(t, s, j.ID(), time.Minute)
	if st.End.ExitCode == nil || *st.End.ExitCode != 0 {
		t.Fatalf("end %v", st.End)
	}
	if w, _ := s.WaitJob(context.Background(), j.ID(), 0); !isDetached(w) {
		t.Fatalf("a passed deadline did not detach an ended job: %#v", w.Outcome)
	}
}

func isDetached(w controller.JobWait) bool {
	_, ok := w.Outcome.(jobs.Detached)
	return ok
}

func TestObservationListsAtMost100LiveJobsByID(t *testing.T) {
	s := startJobSession(t, controller.Options{})
	const n = 102
	var js []*jobs.Job
	for range n {
		js = append(js, runJob(t, s, "exec sleep 1000", controller.JobOptions{}))
	}
	for _, j := range js {
		waitPID(t, j)
	}
	o := s.Jobs().Observe()
	if o.LiveJobCount != n || len(o.RunningJobs) != jobs.MaxObserved {
		t.Fatalf("observation: %d live, %d listed", o.LiveJobCount, len(o.RunningJobs))
	}
	for i, ob := range o.RunningJobs {
		pid, _ := js[i].PID()
		if ob.ID != js[i].ID() || ob.PID == nil || *ob.PID != pid || ob.Command != "exec sleep 1000" || ob.StartedAt == 0 {
			t.Fatalf("observed job %d: %+v", i, ob)
		}
	}
	if err := s.KillJob(context.Background(), js[0].ID()); err != nil {
		t.Fatal(err)
	}
	settle(t, s, js[0].ID(), 30*time.Second)
	if o := s.Jobs().Observe(); o.LiveJobCount != n-1 || o.RunningJobs[0].ID != js[1].ID() {
		t.Fatalf("after a kill: %d live, first %s", o.LiveJobCount, o.RunningJobs[0].ID)
	}
}

func TestACellOverItsBudgetBecomesAJob(t *testing.T) {
	s := startJobSession(t, controller.Options{})
	sink := &captureSink{}
	code := "import time\nprint('a', flush=True)\ntime.sleep(1.5)\nprint('b')\n6*7"
	w, err := s.ExecuteWait(context.Background(), code, 200*time.Millisecond, sink)
	if err != nil {
		t.Fatal(err)
	}
	d, ok := w.Outcome.(jobs.Detached)
	if !ok || w.Cell != nil || !strings.HasPrefix("a\n", string(d.Output.Kept)) {
		t.Fatalf("cell over its budget: %#v", w)
	}
	if o := s.Jobs().Observe(); o.LiveJobCount != 1 || o.RunningJobs[0].ID != d.ID || o.RunningJobs[0].Command != "import time" || o.RunningJobs[0].PID != nil {
		t.Fatalf("observation of the cell job: %+v", o)
	}
	st, w := settle(t, s, d.ID, time.Minute)
	if w.Cell == nil || w.Cell.Status != "ok" || w.Cell.Result == nil || *w.Cell.Result != "42" || w.Err != nil {
		t.Fatalf("cell result %+v, err %v", w.Cell, w.Err)
	}
	if string(st.Output.Kept) != "a\nb\n" || sink.stdout() != "a\nb\n" || st.End.ExitCode == nil || *st.End.ExitCode != 0 {
		t.Fatalf("output %q, sink %q, end %v", st.Output.Kept, sink.stdout(), st.End)
	}

	w, err = s.ExecuteWait(context.Background(), "import kennel\nkennel.display({'text/plain': 'shown'})\n1/0", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, ok = w.Outcome.(jobs.Settled)
	if !ok || w.Cell == nil || w.Cell.Status != "error" || w.Cell.Error.EName != "ZeroDivisionError" || st.End.ExitCode == nil || *st.End.ExitCode != 1 || string(st.Output.Kept) != "shown\n" {
		t.Fatalf("failing cell: %#v, %+v", w, w.Cell)
	}
}

func TestKillingACellJobInterruptsItThenKillsItsKernel(t *testing.T) {
	s := startJobSession(t, controller.Options{InterruptGrace: 300 * time.Millisecond})
	ctx := context.Background()
	execute(t, s, "kept = 1")

	w, err := s.ExecuteWait(ctx, "import time\nwhile True: time.sleep(0.01)", 100*time.Millisecond, nil)
	if err != nil || !isDetached(w) {
		t.Fatalf("looping cell: %#v, %v", w, err)
	}
	id := w.Outcome.Job()
	if err := s.KillJob(ctx, id); err != nil {
		t.Fatal(err)
	}
	st, w := settle(t, s, id, 30*time.Second)
	// The kernel lived on: the job is interrupted, not killed by a signal.
	if w.Cell == nil || w.Cell.Status != "interrupted" || !st.End.Interrupted || st.End.Signal != 0 || st.End.Killed || st.End.String() != "interrupted" {
		t.Fatalf("interrupted cell: %v %+v, %+v", st.End, st.End, w.Cell)
	}
	if res, _ := execute(t, s, "kept"); res.Result == nil || *res.Result != "1" {
		t.Fatalf("an interrupt lost the namespace: %+v", res)
	}

	// A cell that swallows its interrupt: its kernel is killed after the grace.
	_, info, _ := s.Kernel()
	stubborn := "import time\nwhile True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        pass"
	w, err = s.ExecuteWait(ctx, stubborn, 100*time.Millisecond, nil)
	if err != nil || !isDetached(w) {
		t.Fatalf("stubborn cell: %#v, %v", w, err)
	}
	id = w.Outcome.Job()
	if err := s.KillJob(ctx, id); err != nil {
		t.Fatal(err)
	}
	st, w = settle(t, s, id, 30*time.Second)
	if w.Cell != nil || !errors.Is(w.Err, controller.ErrKernelExited) || !st.End.Killed {
		t.Fatalf("stubborn cell: %v, %+v, %v", st.End, w.Cell, w.Err)
	}
	waitGone(t, info.PID)
	if res, _ := execute(t, s, "'kept' in dir()"); res.Result == nil || *res.Result != "False" {
		t.Fatalf("want a fresh kernel: %+v", res)
	}
}

func TestStartPreparesAndPrunesItsStateDir(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	out := filepath.Join(state, "output")
	if err := output.PrepareDir(out); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-output.SpillKeep - time.Hour)
	for name, mtime := range map[string]time.Time{
		"kennel-spill-old": old, "kennel-output-old": old, "kennel-spill-new": time.Now(), "notes-old": old,
	} {
		p := filepath.Join(out, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	s := startJobSession(t, controller.Options{StateDir: state})
	if s.OutputDir() != out {
		t.Fatalf("output dir %s, want %s", s.OutputDir(), out)
	}
	var left []string
	entries, _ := os.ReadDir(out)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := "kennel-spill-new notes-old " + filepath.Base(s.SpillDir()); strings.Join(left, " ") != want {
		t.Fatalf("after the prune: %v, want %s", left, want)
	}

	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts controller.Options
		want error
	}{
		{controller.Options{StateDir: open}, output.ErrNotPrivate},
		{controller.Options{StateDir: state, Truncation: output.On(output.Limits{Lines: -1})}, output.ErrInvalidLimits},
	} {
		tc.opts.Transport, tc.opts.Dir = sharedTransport(), t.TempDir()
		if s, err := controller.Start(context.Background(), tc.opts); !errors.Is(err, tc.want) {
			if s != nil {
				_ = s.Close(context.Background())
			}
			t.Errorf("Start(%+v) = %v, want %v", tc.opts, err, tc.want)
		}
	}
}

// TestPropFollowerWritesExactlyTheReportedWindow feeds a job generated output in random
// chunks, polls a follower at random points and finishes it with the settled report: the
// writer holds a prefix of the report's window at every point, and exactly the window at
// the end, under any truncation.
func TestPropFollowerWritesExactlyTheReportedWindow(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spill")
	if err := output.PrepareDir(dir); err != nil {
		t.Fatal(err)
	}
	rapid.Check(t, func(rt *rapid.T) {
		var tr output.Truncation
		switch rapid.IntRange(0, 3).Draw(rt, "mode") {
		case 0:
			tr = output.Off()
		case 1:
			tr = output.On(output.Limits{Bytes: rapid.Int64Range(1, 64).Draw(rt, "bytes"), Lines: rapid.Int64Range(1, 8).Draw(rt, "lines"), Keep: output.Tail})
		default:
			tr = output.On(output.Limits{Bytes: rapid.Int64Range(1, 64).Draw(rt, "bytes"), Lines: rapid.Int64Range(1, 8).Draw(rt, "lines")})
		}
		// Small pages of capture: a 16-byte prefix and tail and a 48-byte spill, so the
		// follower also meets lost output.
		table, err := jobs.NewTable(jobs.TableOptions{Truncation: tr, Capture: output.CaptureOptions{SpillDir: dir, PrefixBytes: 16, TailBytes: 16, SpillLimit: 48}})
		if err != nil {
			rt.Fatal(err)
		}
		job, err := table.Start(jobs.Spec{Command: "gen", Owner: jobs.OwnerFunc(func(context.Context) error { return nil })})
		if err != nil {
			rt.Fatal(err)
		}
		var out bytes.Buffer
		f := controller.NewOutputFollower(job, tr, &out)
		chunks := rapid.SliceOfN(rapid.SampledFrom([]string{"a", "bc\n", "\n", "é", "€\n", "long line of text\n", "\xff"}), 0, 40).Draw(rt, "chunks")
		for i, c := range chunks {
			if err := job.Output([]byte(c)); err != nil {
				rt.Fatal(err)
			}
			if rapid.Bool().Draw(rt, fmt.Sprintf("poll%d", i)) {
				if err := f.Poll(); err != nil {
					rt.Fatal(err)
				}
			}
		}
		if err := job.Finish(jobs.Exited(0)); err != nil {
			rt.Fatal(err)
		}
		_ = f.Poll()
		report := job.Snapshot().Output
		all := strings.Join(chunks, "")
		if tr.IsOff() {
			// Under Off the follower streams what it saw while it was retained, which may
			// be more than the report keeps past the retention cap: every byte is the
			// job's, in order, and the report's bytes are its start.
			if !strings.HasPrefix(all, out.String()) {
				rt.Fatalf("follower wrote %q, not a prefix of the output %q", out.Bytes(), all)
			}
			if err := f.Finish(report); err != nil {
				rt.Fatal(err)
			}
			if !bytes.HasPrefix(out.Bytes(), report.Kept) || !strings.HasPrefix(all, out.String()) {
				rt.Fatalf("follower wrote %q; the report keeps %q of %q", out.Bytes(), report.Kept, all)
			}
			return
		}
		if !bytes.HasPrefix(report.Kept, out.Bytes()) {
			rt.Fatalf("follower wrote %q, not a prefix of the window %q", out.Bytes(), report.Kept)
		}
		if err := f.Finish(report); err != nil {
			rt.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), report.Kept) {
			rt.Fatalf("follower wrote %q, the window is %q", out.Bytes(), report.Kept)
		}
	})
}

func TestAFollowerStreamsARealJob(t *testing.T) {
	s := startJobSession(t, controller.Options{})
	j := runJob(t, s, "for i in 1 2 3; do echo line$i; sleep 0.1; done; seq 1 3000", controller.JobOptions{})
	var out bytes.Buffer
	f := controller.NewOutputFollower(j, output.Default(), &out)
	for {
		w, err := s.WaitJob(context.Background(), j.ID(), 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Poll(); err != nil {
			t.Fatal(err)
		}
		if st, ok := w.Outcome.(jobs.Settled); ok {
			if err := f.Finish(st.Output); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), st.Output.Kept) || !strings.HasPrefix(out.String(), "line1\nline2\nline3\n1\n") || st.Output.KeptLines != 2000 {
				t.Fatalf("followed %d bytes, window %d bytes (%d lines)", out.Len(), len(st.Output.Kept), st.Output.KeptLines)
			}
			return
		}
	}
}

// TestALocalJobsOutputGoesThroughFIFOs: a local kernel's job writes to FIFOs in the
// session's output dir (not the kernel's pipes, so no job_output frame carries it), its
// exact bytes from stdout and stderr arrive, and no FIFO is left once it ended.
func TestALocalJobsOutputGoesThroughFIFOs(t *testing.T) {
	s := startJobSession(t, controller.Options{})
	j := runJob(t, s, `readlink /proc/$$/fd/1 /proc/$$/fd/2`, controller.JobOptions{})
	st, w := settle(t, s, j.ID(), 30*time.Second)
	if st.End.ExitCode == nil || *st.End.ExitCode != 0 || w.Err != nil {
		t.Fatalf("end %v, %v", st.End, w.Err)
	}
	all := readAll(t, j.Capture())
	lines := strings.Split(string(all), "\n")
	if len(lines) != 3 || lines[2] != "" {
		t.Fatalf("output %q", all)
	}
	for i, name := range []string{"-stdout", "-stderr"} {
		if !strings.HasPrefix(lines[i], filepath.Join(s.SpillDir(), "kennel-fifo-")) || !strings.Contains(lines[i], name) {
			t.Errorf("fd %d of the job is %q, want a FIFO ...%s in %s", i+1, lines[i], name, s.SpillDir())
		}
	}
	j = runJob(t, s, `printf 'a\000\377b' >&2`, controller.JobOptions{})
	settle(t, s, j.ID(), 30*time.Second)
	if got := readAll(t, j.Capture()); string(got) != "a\x00\xffb" {
		t.Errorf("stderr bytes %q, want %q", got, "a\x00\xffb")
	}
	left, _ := filepath.Glob(filepath.Join(s.SpillDir(), "kennel-fifo-*"))
	if len(left) != 0 {
		t.Errorf("FIFOs left after the job: %v", left)
	}
}

// TestADaemonizedGrandchildDoesNotHoldAFIFOJob: `sleep 30 & echo hi` leaves a process of
// the job's group holding its FIFOs after the shell ended; the job still ends (within the
// kill grace of the kernel's job_end, far before the sleep) with "hi" counted.
func TestADaemonizedGrandchildDoesNotHoldAFIFOJob(t *testing.T) {
	s := startJobSession(t, controller.Options{JobKillGrace: 300 * time.Millisecond})
	j := runJob(t, s, "sleep 30 & echo hi", controller.JobOptions{})
	pgid := waitPID(t, j)
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	st, w := settle(t, s, j.ID(), 20*time.Second)
	if st.End.ExitCode == nil || *st.End.ExitCode != 0 || w.Err != nil || string(st.Output.Kept) != "hi\n" || st.Output.TotalBytes != 3 {
		t.Fatalf("end %v, %v, output %+v; want exit 0 with hi", st.End, w.Err, st.Output)
	}
	if len(groupMembers(t, pgid)) == 0 {
		t.Fatal("the grandchild is gone: the test did not hold a FIFO open past the end")
	}
}

// TestAWrappedJobsOutputStillGoesThroughFrames: a transport without SameFS (the setsid
// wrapper) keeps the kernel's pipes and job_output frames, with the exact bytes.
func TestAWrappedJobsOutputStillGoesThroughFrames(t *testing.T) {
	sb := wrappedtest.Setsid(t, wrapped.Options{})
	s := startJobSession(t, controller.Options{Transport: sb.Transport, Dir: sb.HostDir, SandboxDir: sb.Map.Dir()})
	j := runJob(t, s, `readlink /proc/$$/fd/1 /proc/$$/fd/2`, controller.JobOptions{})
	st, w := settle(t, s, j.ID(), 30*time.Second)
	if st.End.ExitCode == nil || *st.End.ExitCode != 0 || w.Err != nil {
		t.Fatalf("end %v, %v", st.End, w.Err)
	}
	lines := strings.Split(string(readAll(t, j.Capture())), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "pipe:[") || !strings.HasPrefix(lines[1], "pipe:[") {
		t.Fatalf("output %q, want two pipes", lines)
	}
	j = runJob(t, s, `printf 'a\000\377b' >&2`, controller.JobOptions{})
	settle(t, s, j.ID(), 30*time.Second)
	if got := readAll(t, j.Capture()); string(got) != "a\x00\xffb" {
		t.Errorf("stderr bytes %q, want %q", got, "a\x00\xffb")
	}
}

// TestJobRunEncodesItsFIFOsOnlyWhenSet: the job_run frame names stdout and stderr only
// when they are set, and any strings round-trip through JSON.
func TestJobRunEncodesItsFIFOsOnlyWhenSet(t *testing.T) {
	for _, tc := range []struct {
		f    protocol.JobRun
		want string
	}{
		{protocol.JobRun{ID: "j1", Command: "c"}, `{"type":"job_run","id":"j1","command":"c"}`},
		{protocol.JobRun{ID: "j1", Command: "c", Stdout: "/p/a", Stderr: "/p/b"}, `{"type":"job_run","id":"j1","command":"c","stdout":"/p/a","stderr":"/p/b"}`},
		{protocol.JobRun{ID: "j1", Command: "c", Stderr: "/p/\"b"}, `{"type":"job_run","id":"j1","command":"c","stderr":"/p/\"b"}`},
	} {
		got, err := tc.f.MarshalLine()
		if err != nil || string(got) != tc.want+"\n" {
			t.Errorf("%+v: %s, %v; want %s", tc.f, got, err, tc.want)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		f := protocol.JobRun{ID: rapid.String().Draw(t, "id"), Command: rapid.String().Draw(t, "cmd"),
			Stdout: rapid.String().Draw(t, "stdout"), Stderr: rapid.String().Draw(t, "stderr")}
		line, err := f.MarshalLine()
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]string
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		_, hasOut := m["stdout"]
		_, hasErr := m["stderr"]
		if m["type"] != "job_run" || m["id"] != f.ID || m["command"] != f.Command || m["stdout"] != f.Stdout || m["stderr"] != f.Stderr ||
			hasOut != (f.Stdout != "") || hasErr != (f.Stderr != "") {
			t.Fatalf("%+v encoded as %s", f, line)
		}
	})
}
