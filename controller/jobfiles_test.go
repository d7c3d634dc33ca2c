package controller

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/output"
	"github.com/kennel-dev/kennel/protocol"
	"github.com/kennel-dev/kennel/transports/local"
)

// startFIFOSession starts a local session (SameFS) for the job output file tests of
// this package.
func startFIFOSession(t *testing.T) *Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Start(ctx, Options{
		Transport:    local.New(local.Options{}),
		Dir:          t.TempDir(),
		StateDir:     filepath.Join(t.TempDir(), "state"),
		JobKillGrace: 300 * time.Millisecond,
	})
	if err != nil {
		if errors.Is(err, images.ErrNoPython) {
			testneed.Missing(t, "python3", err)
		}
		t.Fatalf("start session: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

// filesOf returns the output files the controller made for job j.
func filesOf(t *testing.T, s *Session, j *jobs.Job) *jobFiles {
	t.Helper()
	r, err := s.jobs.get(j.ID())
	if err != nil {
		t.Fatal(err)
	}
	f, ok := r.streams.(*jobFiles)
	if !ok {
		t.Fatalf("job %s has no output files", j.ID())
	}
	return f
}

// tailDone fails the test unless the files' tail has returned and, when gone is set,
// the files are removed.
func tailDone(t *testing.T, f *jobFiles, gone bool) {
	t.Helper()
	select {
	case <-f.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the output files' tail still runs after the job's end")
	}
	if !gone {
		return
	}
	for _, p := range f.paths {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("output file %s left behind: %v", p, err)
		}
	}
}

// TestAKernelThatCannotOpenItsFilesFallsBackToFrames names a symlink to a file, a
// directory and a missing path as the job's stdout or stderr: the stub refuses each (it
// opens with O_NOFOLLOW a file or a FIFO that is there) and forwards the output as
// frames, the symlink's target is untouched, and the controller's tail ends and removes
// its files.
func TestAKernelThatCannotOpenItsFilesFallsBackToFrames(t *testing.T) {
	s := startFIFOSession(t)
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(plain, link); err != nil {
		t.Fatal(err)
	}
	for _, edit := range []func(*protocol.JobRun){
		func(f *protocol.JobRun) { f.Stdout = link },
		func(f *protocol.JobRun) { f.Stdout = dir },
		func(f *protocol.JobRun) { f.Stderr = filepath.Join(t.TempDir(), "missing") },
	} {
		j, err := s.runJob(context.Background(), "echo out; echo err >&2", JobOptions{}, edit)
		if err != nil {
			t.Fatal(err)
		}
		f := filesOf(t, s, j)
		w, err := s.WaitJob(context.Background(), j.ID(), 30*time.Second)
		st, ok := w.Outcome.(jobs.Settled)
		if err != nil || !ok || st.End.ExitCode == nil || *st.End.ExitCode != 0 {
			t.Fatalf("wait: %v, %#v", err, w)
		}
		if got := string(st.Output.Kept); got != "out\nerr\n" && got != "err\nout\n" {
			t.Errorf("output %q, want out and err", got)
		}
		tailDone(t, f, true)
	}
	if b, _ := os.ReadFile(plain); string(b) != "keep" {
		t.Fatalf("the symlink's target was written: %q", b)
	}
}

// TestTheTailEndsWithTheKernel: a job whose kernel dies keeps no tail, even while its own
// process (killed with the kernel's group here) held the files.
func TestTheTailEndsWithTheKernel(t *testing.T) {
	s := startFIFOSession(t)
	j, err := s.RunJob(context.Background(), "echo hi; exec sleep 1000", JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := filesOf(t, s, j)
	for deadline := time.Now().Add(10 * time.Second); j.Capture().Stat().Seen < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no output from the job")
		}
	}
	// Output can arrive through the files before the job's start frame names its pid.
	var pid int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var ok bool
		if pid, ok = j.PID(); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the job has no pid")
		}
	}
	t.Cleanup(func() { _ = testproc.KillGroup(pid, syscall.SIGKILL) })
	_, info, _ := s.Kernel()
	if err := testproc.Kill(info.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	w, err := s.WaitJob(context.Background(), j.ID(), 30*time.Second)
	if err != nil || !errors.Is(w.Err, ErrKernelExited) {
		t.Fatalf("wait: %v, %#v", err, w)
	}
	tailDone(t, f, false)
	if st := j.Capture().Stat(); st.Seen != 3 {
		t.Fatalf("capture %+v, want the 3 bytes of hi", st)
	}
}

// TestAFileJobWhoseCommandFailsLeavesNothing: a command the shell cannot exec ends, with
// its tail, and leaves no file.
func TestAFileJobWhoseCommandFailsLeavesNothing(t *testing.T) {
	s := startFIFOSession(t)
	j, err := s.RunJob(context.Background(), "exec /nonexistent/x", JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := filesOf(t, s, j)
	w, _ := s.WaitJob(context.Background(), j.ID(), 30*time.Second)
	if st, ok := w.Outcome.(jobs.Settled); !ok || st.End.ExitCode == nil || *st.End.ExitCode != 127 {
		t.Fatalf("wait: %#v", w)
	}
	tailDone(t, f, true)
	left, _ := filepath.Glob(filepath.Join(s.SpillDir(), "kennel-out-*"))
	if len(left) != 0 {
		t.Fatalf("files left: %v", left)
	}
}

// TestJobFilesOutliveTheirReaderAndAreReadAgain: a job's output files with a small keep:
// while a tail reads, what it consumed past keep is punched (the files' disk stays near
// keep plus a few MiB however much was written); the tail stops (its controller gone)
// and the job writes on, as a file never refuses; a second tail on the same files, as a
// restarted controller's, reads them from the start: its job's seen is exactly what was
// written, the first keep bytes are read back as written, the punched range is lost
// (never read as zeros), and everything after it is the job's bytes.
func TestJobFilesOutliveTheirReaderAndAreReadAgain(t *testing.T) {
	dir := privateDir(t)
	const keep = 1 << 20
	pool := newFilePool()
	first := testJob(t)
	f, err := newJobFiles(dir, "", keep, false, first, pool)
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(f.paths[0], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte('a' + i%26)
	}
	var written int64
	write := func(n int) {
		for range n {
			if _, err := w.Write(block); err != nil {
				t.Fatal(err)
			}
			written += int64(len(block))
		}
	}
	write(64)
	for deadline := time.Now().Add(30 * time.Second); first.Capture().Stat().Seen < written; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the tail read %d of %d bytes", first.Capture().Stat().Seen, written)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(f.paths[0], &st); err != nil {
		t.Fatal(err)
	}
	if disk := st.Blocks * 512; disk > keep+2*punchEvery {
		t.Errorf("the file holds %d bytes of disk after %d written and read (keep %d): nothing punched", disk, written, keep)
	}
	f.stop()
	tailDone(t, f, false)
	write(8) // the controller is gone; the job writes on

	second := testJob(t)
	g, err := resumeJobFiles(f.paths, f.named, keep, second, pool)
	if err != nil {
		t.Fatal(err)
	}
	write(2)
	g.drain(10 * time.Second)
	tailDone(t, g, false)
	for _, p := range g.paths {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("a picked-up job's file went before its end was recorded: %v", err)
		}
	}
	g.remove()
	tailDone(t, g, true)
	cs := second.Capture().Stat()
	if cs.Seen != written {
		t.Fatalf("the second tail's job saw %d bytes, want the %d written", cs.Seen, written)
	}
	head, err := second.Capture().ReadPage(0, output.MaxPage)
	if err != nil || !bytes.Equal(head.Data, block[:output.MaxPage]) {
		t.Fatalf("the first bytes read again: %v", err)
	}
	if _, err := second.Capture().ReadPage(keep-1, 1); err != nil {
		t.Fatalf("the last byte of keep: %v", err)
	}
	if _, err := second.Capture().ReadPage(keep, 1); !errors.Is(err, output.ErrLost) {
		t.Fatalf("the first byte past keep (punched) read: %v", err)
	}
	tail, err := second.Capture().ReadPage(written-1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	off := (written - 1000) % int64(len(block))
	if !bytes.Equal(tail.Data, block[off:off+1000]) {
		t.Fatal("the last bytes are not the job's")
	}
}

// TestAHostileSparseOutputFileIsNotReadAsZeros: a kernel that makes its job's output file
// sparse (a pwrite a GiB past its end, then an ftruncate to a TiB) cannot make the
// controller read zeros: the hole is counted as lost and skipped (its file system's
// block is the grain: the rest of a data block reads as data), the data around it read
// exactly, and the trailing hole never read; the tail ends at once at the job's end.
func TestAHostileSparseOutputFileIsNotReadAsZeros(t *testing.T) {
	dir := privateDir(t)
	job := testJob(t)
	f, err := newJobFiles(dir, "", 0, false, job, newFilePool())
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(f.paths[0], os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteAt([]byte("head"), 0); err != nil {
		t.Fatal(err)
	}
	const far = 1 << 30
	if _, err := w.WriteAt([]byte("tail"), far); err != nil {
		t.Fatal(err)
	}
	if err := w.Truncate(1 << 40); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); job.Capture().Stat().Seen < far+4; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the tail saw %d bytes, want the data around the hole", job.Capture().Stat().Seen)
		}
	}
	start := time.Now()
	f.drain(10 * time.Second)
	tailDone(t, f, true)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the tail took %v to end past a TiB hole: it read it", took)
	}
	// The file system's block is the grain of its holes: the rest of a block that holds
	// data reads as data (its zeros), at most a block past each run; no more.
	if st := job.Capture().Stat(); st.Seen < far+4 || st.Seen > far+punchBlock {
		t.Fatalf("seen %d, want %d and at most a block more: the data and the hole between, not the hole after", st.Seen, int64(far+4))
	}
	for _, c := range []struct {
		off  int64
		want string
	}{{0, "head"}, {far, "tail"}} {
		p, err := job.Capture().ReadPage(c.off, 4)
		if err != nil || string(p.Data) != c.want {
			t.Fatalf("at %d: %q, %v; want %q", c.off, p.Data, err, c.want)
		}
	}
	if _, err := job.Capture().ReadPage(far/2, 1); !errors.Is(err, output.ErrLost) {
		t.Fatalf("a byte of the hole read: %v", err)
	}
}

// TestAJobARecordRefusesLeavesNoFile: a job whose record the store refuses (OnJob fails)
// is refused, never runs, and leaves no output file behind.
func TestAJobARecordRefusesLeavesNoFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	refused := errors.New("no room for the record")
	s, err := Start(ctx, Options{
		Transport: local.New(local.Options{}),
		Dir:       t.TempDir(),
		StateDir:  filepath.Join(t.TempDir(), "state"),
		OnJob:     func(JobRecord) error { return refused },
	})
	if err != nil {
		if errors.Is(err, images.ErrNoPython) {
			testneed.Missing(t, "python3", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	marker := filepath.Join(t.TempDir(), "ran")
	if _, err := s.RunJob(ctx, "touch "+marker, JobOptions{}); !errors.Is(err, refused) {
		t.Fatalf("run job: %v, want the record's refusal", err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused job ran: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(s.SpillDir(), jobFileNamePrefix+"*")); len(left) != 0 {
		t.Fatalf("files of the refused job left: %v", left)
	}
}

// TestResumeRefusesFilesNotAJobs: paths that are not a job's output files (another
// name, a symlink to one, a FIFO) are refused and left as they were.
func TestResumeRefusesFilesNotAJobs(t *testing.T) {
	dir := privateDir(t)
	pool := newFilePool()
	real := filepath.Join(dir, jobFileNamePrefix+strings.Repeat("ab", 16))
	for _, suffix := range []string{"-stdout", "-stderr"} {
		if err := os.WriteFile(real+suffix, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	other := filepath.Join(dir, "passwd")
	if err := os.WriteFile(other+"-stdout", []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	linked := filepath.Join(dir, jobFileNamePrefix+strings.Repeat("cd", 16))
	if err := os.Symlink(other+"-stdout", linked+"-stdout"); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, jobFileNamePrefix+strings.Repeat("ef", 16))
	if err := syscall.Mkfifo(fifo+"-stdout", 0o600); err != nil {
		t.Fatal(err)
	}
	for _, base := range []string{other, linked, fifo, filepath.Join(dir, jobFileNamePrefix+strings.Repeat("99", 16))} {
		p := [2]string{base + "-stdout", base + "-stderr"}
		if _, err := resumeJobFiles(p, p, 0, testJob(t), pool); err == nil {
			t.Errorf("resume of %s accepted", base)
		}
	}
	if _, err := resumeJobFiles([2]string{real + "-stdout", other + "-stderr"}, [2]string{}, 0, testJob(t), pool); err == nil {
		t.Error("resume of two files of different jobs accepted")
	}
	if b, _ := os.ReadFile(other + "-stdout"); string(b) != "secret" {
		t.Fatalf("a refused file changed: %q", b)
	}
}

// privateDir is a fresh 0700 directory.
func privateDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}
