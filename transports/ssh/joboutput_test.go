package ssh_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/output"
	"github.com/kennel-dev/kennel/transports/ssh"
	"github.com/kennel-dev/kennel/transports/ssh/sshtest"
)

// startJobSession starts a controller session on a remote kernel of srv (attached, or
// detached), with JobKillGrace grace (0: the default), closed at cleanup.
func startJobSession(t testing.TB, srv *sshtest.Server, detached bool, grace time.Duration) *controller.Session {
	t.Helper()
	hosts := newHosts(t, srv)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := controller.Options{
		Transport:    ssh.New(hosts, ssh.Options{Target: sshtest.Alias, Detached: detached}),
		Dir:          dir,
		StateDir:     filepath.Join(t.TempDir(), "state"),
		JobKillGrace: grace,
	}
	s, err := controller.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

// settleJob runs command as a job of s and waits for its end (at most budget).
func settleJob(t testing.TB, s *controller.Session, command string, budget time.Duration) (*jobs.Job, jobs.Settled) {
	t.Helper()
	ctx := context.Background()
	j, err := s.RunJob(ctx, command, controller.JobOptions{})
	if err != nil {
		t.Fatalf("run job %q: %v", command, err)
	}
	w, err := s.WaitJob(ctx, j.ID(), budget)
	if err != nil {
		t.Fatalf("wait job %q: %v", command, err)
	}
	st, ok := w.Outcome.(jobs.Settled)
	if !ok || w.Err != nil {
		t.Fatalf("job %q did not settle by itself within %v: %#v, %v", command, budget, w.Outcome, w.Err)
	}
	return j, st
}

// captured reads a job's whole capture.
func captured(t testing.TB, c *output.Capture) []byte {
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

// runDirOf returns the remote run directory of s's kernel (its Info.ID's last part).
func runDirOf(t testing.TB, s *controller.Session) string {
	t.Helper()
	execCell(t, s, "pass")
	_, info, ok := s.Kernel()
	i := strings.LastIndex(info.ID, ":")
	if !ok || i < 0 {
		t.Fatalf("kernel info %+v", info)
	}
	return info.ID[i+1:]
}

// execCell runs code in s's kernel and fails t unless it ran ok.
func execCell(t testing.TB, s *controller.Session, code string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := s.Execute(ctx, code, nil)
	if err != nil || res.Status != "ok" {
		t.Fatalf("cell: %v %+v", err, res)
	}
}

// noRelayLeft waits until no process marked with the run (sshtest's host is this one)
// is a relay's cat, failing t after 10 s.
func noRelayLeft(t testing.TB, runDir string) {
	t.Helper()
	marker := []byte("KENNEL_REMOTE_RUN=" + path.Base(runDir))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var left []string
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			if string(comm) == "cat\n" && bytes.Contains(env, marker) {
				left = append(left, e.Name())
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay processes left after the job: %v", left)
		}
	}
}

// TestAnSSHJobsOutputComesOverAChannelOfItsOwn: a remote job's stdout and stderr are
// FIFOs in the kernel's run directory, relayed raw over an ssh session of their own (no
// job_output frame carries them); its exact bytes arrive from both streams, each in
// order, past the login profile's banner; the FIFOs and the relay are gone once the job
// ended.
func TestAnSSHJobsOutputComesOverAChannelOfItsOwn(t *testing.T) {
	srv := sshtest.Start(t)
	for _, detached := range []bool{false, true} {
		t.Run(fmt.Sprintf("detached=%v", detached), func(t *testing.T) {
			s := startJobSession(t, srv, detached, 0)
			runDir := runDirOf(t, s)
			_, st := settleJob(t, s, `readlink /proc/$$/fd/1; readlink /proc/$$/fd/2 >&2`, time.Minute)
			lines := strings.Split(strings.TrimSuffix(string(st.Output.Kept), "\n"), "\n")
			if len(lines) != 2 {
				t.Fatalf("output %q", st.Output.Kept)
			}
			for _, l := range lines { // "... (deleted)": the relay removed the paths at job_start
				if !strings.HasPrefix(l, runDir+"/kennel-fifo-") {
					t.Errorf("the job's fd is %q, want a FIFO in %s", l, runDir)
				}
			}

			j, st := settleJob(t, s, `seq 1 200000; printf 'a\000\377b' >&2`, time.Minute)
			var want bytes.Buffer
			for i := 1; i <= 200000; i++ {
				fmt.Fprintf(&want, "%d\n", i)
			}
			all := captured(t, j.Capture())
			stderr := []byte("a\x00\xffb")
			i := bytes.Index(all, stderr)
			if i < 0 || st.Output.TotalBytes != int64(want.Len()+len(stderr)) {
				t.Fatalf("output of %d bytes (total %d), want %d with the stderr bytes: %q", len(all), st.Output.TotalBytes, want.Len()+len(stderr), all[:min(len(all), 200)])
			}
			if got := append(all[:i:i], all[i+len(stderr):]...); !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("stdout is not seq 1 200000 in order (%d bytes)", len(got))
			}
			if bytes.Contains(all, []byte(sshtest.Banner)) {
				t.Fatal("the login profile's banner is in the job's output")
			}
			left, _ := filepath.Glob(filepath.Join(runDir, "kennel-fifo-*"))
			if len(left) != 0 {
				t.Errorf("FIFOs left in the run directory: %v", left)
			}
			noRelayLeft(t, runDir)
		})
	}
}

// TestAnSSHJobThatClosesItsStdoutEarly: the stdout FIFO ends while stderr goes on; both
// streams' bytes arrive and the job ends once.
func TestAnSSHJobThatClosesItsStdoutEarly(t *testing.T) {
	s := startJobSession(t, sshtest.Start(t), false, 0)
	_, st := settleJob(t, s, `echo out; exec 1>&-; sleep 0.3; echo err >&2; exit 7`, time.Minute)
	if st.End.ExitCode == nil || *st.End.ExitCode != 7 {
		t.Fatalf("end %v, want exit 7", st.End)
	}
	if got := string(st.Output.Kept); got != "out\nerr\n" {
		t.Fatalf("output %q", got)
	}
}

// TestAHugeBurstFromAnSSHJobIsCountedExactly: 256 MiB as fast as the job can write them,
// with some on stderr at once: every byte counted (kept + dropped), none lost.
func TestAHugeBurstFromAnSSHJobIsCountedExactly(t *testing.T) {
	s := startJobSession(t, sshtest.Start(t), false, 0)
	t0 := time.Now()
	_, st := settleJob(t, s, `head -c 1M /dev/zero >&2 & head -c 256M /dev/zero; wait; echo tail`, 5*time.Minute)
	const total = 257<<20 + 5
	r := st.Output
	if r.TotalBytes != total || r.KeptBytes+r.DroppedBytes != total || r.TotalLines != 1 || r.KeptLines+r.DroppedLines != 1 {
		t.Fatalf("total %d, kept %d + dropped %d, lines %d (kept %d, dropped %d); want %d bytes, 1 line", r.TotalBytes, r.KeptBytes, r.DroppedBytes, r.TotalLines, r.KeptLines, r.DroppedLines, int64(total))
	}
	t.Logf("257 MiB in %v", time.Since(t0))
}

// TestAnSSHKernelThatCannotOpenItsFIFOsFallsBackToFrames: a kernel whose FIFO opens fail
// (a cell makes its stub's opener refuse) still delivers the job's exact output, through
// frames, and the relay ends.
func TestAnSSHKernelThatCannotOpenItsFIFOsFallsBackToFrames(t *testing.T) {
	s := startJobSession(t, sshtest.Start(t), false, 0)
	runDir := runDirOf(t, s)
	execCell(t, s, `import kennel._jobs as _j
_j._open_fifos = lambda job_id, out, err: (None, "refused by the test")`)
	_, st := settleJob(t, s, `readlink /proc/$$/fd/1; echo err >&2`, time.Minute)
	if got := string(st.Output.Kept); !strings.HasPrefix(got, "pipe:") || !strings.HasSuffix(got, "\nerr\n") {
		t.Fatalf("output %q, want a pipe and err", got)
	}
	noRelayLeft(t, runDir)
}

// TestAnSSHKernelThatHoldsItsFIFOs: a hostile kernel that keeps a job's FIFOs open after
// the job ended (it dups them) cannot hold the job: it ends JobKillGrace after the
// kernel's job_end, with every byte the job wrote, and the relay it held ends then too.
func TestAnSSHKernelThatHoldsItsFIFOs(t *testing.T) {
	s := startJobSession(t, sshtest.Start(t), false, 500*time.Millisecond)
	runDir := runDirOf(t, s)
	execCell(t, s, `import os, kennel._jobs as _j
_held = []
_open = _j._open_fifos
def _holding(job_id, out, err):
    fds, why = _open(job_id, out, err)
    if fds:
        _held.extend(os.dup(fd) for fd in fds)
    return fds, why
_j._open_fifos = _holding`)
	_, st := settleJob(t, s, `echo held`, time.Minute)
	if got := string(st.Output.Kept); got != "held\n" {
		t.Fatalf("output %q", got)
	}
	execCell(t, s, `assert len(_held) == 2, _held`)
	noRelayLeft(t, runDir) // the stop killed it, though the kernel holds its FIFOs
}
