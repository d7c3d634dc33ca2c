package controller

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/protocol"
	"github.com/kennel-dev/kennel/transports/local"
)

// startFIFOSession starts a local session (SameFS) for the FIFO tests of this package.
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

// fifosOf returns the FIFOs the controller made for job j.
func fifosOf(t *testing.T, s *Session, j *jobs.Job) *jobFIFOs {
	t.Helper()
	r, err := s.jobs.get(j.ID())
	if err != nil {
		t.Fatal(err)
	}
	f, ok := r.fifos.(*jobFIFOs)
	if !ok {
		t.Fatalf("job %s has no FIFOs", j.ID())
	}
	return f
}

// readersDone fails the test unless both FIFO readers have returned and the FIFOs' paths
// are gone.
func readersDone(t *testing.T, f *jobFIFOs) {
	t.Helper()
	select {
	case <-f.done:
	case <-time.After(10 * time.Second):
		t.Fatal("FIFO readers still running after the job's end")
	}
	for _, p := range f.paths {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("FIFO %s left behind: %v", p, err)
		}
	}
}

// TestAKernelThatCannotOpenItsFIFOsFallsBackToFrames names a regular file as the job's
// stdout: the stub refuses it (not a FIFO) and forwards the output as frames, the file is
// untouched, the controller's readers end and its FIFOs are removed.
func TestAKernelThatCannotOpenItsFIFOsFallsBackToFrames(t *testing.T) {
	s := startFIFOSession(t)
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, edit := range []func(*protocol.JobRun){
		func(f *protocol.JobRun) { f.Stdout = plain },
		func(f *protocol.JobRun) { f.Stderr = filepath.Join(t.TempDir(), "missing") },
	} {
		j, err := s.runJob(context.Background(), "echo out; echo err >&2", JobOptions{}, edit)
		if err != nil {
			t.Fatal(err)
		}
		f := fifosOf(t, s, j)
		w, err := s.WaitJob(context.Background(), j.ID(), 30*time.Second)
		st, ok := w.Outcome.(jobs.Settled)
		if err != nil || !ok || st.End.ExitCode == nil || *st.End.ExitCode != 0 {
			t.Fatalf("wait: %v, %#v", err, w)
		}
		if got := string(st.Output.Kept); got != "out\nerr\n" && got != "err\nout\n" {
			t.Errorf("output %q, want out and err", got)
		}
		readersDone(t, f)
	}
	if b, _ := os.ReadFile(plain); string(b) != "keep" {
		t.Fatalf("the named regular file was written: %q", b)
	}
}

// TestFIFOReadersEndWithTheirKernel: a job whose kernel dies keeps no reader, even while
// its own process (killed with the kernel's group here) held the FIFOs.
func TestFIFOReadersEndWithTheirKernel(t *testing.T) {
	s := startFIFOSession(t)
	j, err := s.RunJob(context.Background(), "echo hi; exec sleep 1000", JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := fifosOf(t, s, j)
	for deadline := time.Now().Add(10 * time.Second); j.Capture().Stat().Seen < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no output from the job")
		}
	}
	// Output can arrive through the FIFOs before the job's start frame names its pid.
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
	readersDone(t, f)
	if st := j.Capture().Stat(); st.Seen != 3 {
		t.Fatalf("capture %+v, want the 3 bytes of hi", st)
	}
}

// TestAFIFOJobWhoseCommandFailsLeaksNoReader: a command the shell cannot exec ends, with
// its readers, and leaves no FIFO.
func TestAFIFOJobWhoseCommandFailsLeaksNoReader(t *testing.T) {
	s := startFIFOSession(t)
	j, err := s.RunJob(context.Background(), "exec /nonexistent/x", JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := fifosOf(t, s, j)
	w, _ := s.WaitJob(context.Background(), j.ID(), 30*time.Second)
	if st, ok := w.Outcome.(jobs.Settled); !ok || st.End.ExitCode == nil || *st.End.ExitCode != 127 {
		t.Fatalf("wait: %#v", w)
	}
	readersDone(t, f)
	left, _ := filepath.Glob(filepath.Join(s.SpillDir(), "kennel-fifo-*"))
	if len(left) != 0 {
		t.Fatalf("FIFOs left: %v", left)
	}
}
