package controller_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/output"
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
