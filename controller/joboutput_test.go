package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/output"
	"github.com/kennel-dev/kennel/protocol"
	"github.com/kennel-dev/kennel/transports/wrapped"
	"github.com/kennel-dev/kennel/transports/wrapped/wrappedtest"
	"pgregory.net/rapid"
)

func TestAFollowerStreamsARealJob(t *testing.T) {
	s := startJobSession(t, controller.Options{})
	j := runJob(t, s, "for i in 1 2 3; do echo line$i; sleep 0.1; done; seq 1 3000", controller.JobOptions{})
	var out bytes.Buffer
	f := output.NewFollower(j.Capture(), output.Default(), &out)
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
		if !strings.HasPrefix(lines[i], filepath.Join(s.SpillDir(), "kennel-out-")) || !strings.Contains(lines[i], name) {
			t.Errorf("fd %d of the job is %q, want a FIFO ...%s in %s", i+1, lines[i], name, s.SpillDir())
		}
	}
	j = runJob(t, s, `printf 'a\000\377b' >&2`, controller.JobOptions{})
	settle(t, s, j.ID(), 30*time.Second)
	if got := readAll(t, j.Capture()); string(got) != "a\x00\xffb" {
		t.Errorf("stderr bytes %q, want %q", got, "a\x00\xffb")
	}
	left, _ := filepath.Glob(filepath.Join(s.SpillDir(), "kennel-out-*"))
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
	t.Cleanup(func() { _ = testproc.KillGroup(pgid, syscall.SIGKILL) })
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
		got, err := protocol.MarshalLine(tc.f)
		if err != nil || string(got) != tc.want+"\n" {
			t.Errorf("%+v: %s, %v; want %s", tc.f, got, err, tc.want)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		f := protocol.JobRun{ID: rapid.String().Draw(t, "id"), Command: rapid.String().Draw(t, "cmd"),
			Stdout: rapid.String().Draw(t, "stdout"), Stderr: rapid.String().Draw(t, "stderr")}
		line, err := protocol.MarshalLine(f)
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

// TestAFollowerOfAWindowAsLargeAsTheSpillWritesExactlyItsReport: a real job prints 22 MB of
// lines under a head window of 16 MiB, the spill limit: its report is made from the
// retained 16 MiB alone and keeps less than the window allows, and a follower that
// streamed the job still ends with exactly the report's bytes (before the fix it wrote a
// line the report does not keep and Finish failed: `kennel run --sh` exited 1).
func TestAFollowerOfAWindowAsLargeAsTheSpillWritesExactlyItsReport(t *testing.T) {
	s := startJobSession(t, controller.Options{})
	tr := output.On(output.Limits{Bytes: output.DefaultSpillLimit, Lines: 1 << 30})
	j := runJob(t, s, "seq 1 3000000", controller.JobOptions{Truncation: &tr})
	var out bytes.Buffer
	f := output.NewFollower(j.Capture(), tr, &out)
	for {
		w, err := s.WaitJob(context.Background(), j.ID(), 20*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Poll(); err != nil {
			t.Fatal(err)
		}
		st, ok := w.Outcome.(jobs.Settled)
		if !ok {
			continue
		}
		if st.Output.TotalBytes <= output.DefaultSpillLimit || st.Output.Retained == nil {
			t.Fatalf("the job's %d bytes did not outgrow the spill", st.Output.TotalBytes)
		}
		if err := f.Finish(st.Output); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), st.Output.Kept) {
			t.Fatalf("followed %d bytes, the report keeps %d", out.Len(), len(st.Output.Kept))
		}
		return
	}
}
