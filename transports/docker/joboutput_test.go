package docker_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/output"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
)

// startJobSession starts a controller session on a locked-down run-mode kernel (working
// directory /tmp: as a root operator's, it runs as FallbackUser, another uid than the
// controller's) with opts' JobKillGrace, closed at cleanup.
func startJobSession(t testing.TB, o docker.Options, grace time.Duration) *controller.Session {
	t.Helper()
	cli := dockerneed.KernelEngine(t)
	b, err := images.Stub()
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := controller.Start(ctx, controller.Options{
		Transport:    newTransport(t, cli, o),
		Dir:          t.TempDir(),
		SandboxDir:   "/tmp",
		Bundle:       b.Hash(),
		StateDir:     state,
		JobKillGrace: grace,
	})
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
func settleJob(t testing.TB, s *controller.Session, command string, opts controller.JobOptions, budget time.Duration) (*jobs.Job, jobs.Settled, time.Duration) {
	t.Helper()
	ctx := context.Background()
	t0 := time.Now()
	j, err := s.RunJob(ctx, command, opts)
	if err != nil {
		t.Fatalf("run job %q: %v", command, err)
	}
	w, err := s.WaitJob(ctx, j.ID(), budget)
	took := time.Since(t0)
	if err != nil {
		t.Fatalf("wait job %q: %v", command, err)
	}
	st, ok := w.Outcome.(jobs.Settled)
	if !ok || w.Err != nil {
		t.Fatalf("job %q did not settle by itself within %v: %#v, %v", command, budget, w.Outcome, w.Err)
	}
	return j, st, took
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

// TestAContainerJobWritesToTheSessionsFiles: a job in a container (another uid than the
// controller's) has files as its stdout and stderr, in the session's job output directory
// mounted at docker.ContainerJobOutDir: its output never passes through the kernel's
// Python. Its exact bytes arrive from both streams, each in order, and the files are gone
// once it ended. The mount holds nothing the kernel can list, make or change.
func TestAContainerJobWritesToTheSessionsFiles(t *testing.T) {
	s := startJobSession(t, docker.Options{}, 0)
	_, st, _ := settleJob(t, s, `readlink /proc/$$/fd/1; readlink /proc/$$/fd/2 >&2`, controller.JobOptions{}, time.Minute)
	lines := strings.Split(strings.TrimSuffix(string(st.Output.Kept), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("output %q", st.Output.Kept)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, docker.ContainerJobOutDir+"/kennel-out-") {
			t.Errorf("the job's fd is %q, want a file in %s", l, docker.ContainerJobOutDir)
		}
	}

	// Exact bytes, order per stream: 200,000 numbered lines on stdout, raw bytes on
	// stderr (all retained: the capture spills up to 16 MiB).
	j, st, _ := settleJob(t, s, `seq 1 200000; printf 'a\000\377b' >&2`, controller.JobOptions{}, time.Minute)
	var want bytes.Buffer
	for i := 1; i <= 200000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	all := captured(t, j.Capture())
	stderr := []byte("a\x00\xffb")
	i := bytes.Index(all, stderr)
	if i < 0 || st.Output.TotalBytes != int64(want.Len()+len(stderr)) {
		t.Fatalf("output of %d bytes (total %d), want %d with the stderr bytes", len(all), st.Output.TotalBytes, want.Len()+len(stderr))
	}
	if got := append(all[:i:i], all[i+len(stderr):]...); !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("stdout is not seq 1 200000 in order (%d bytes)", len(got))
	}

	// What the kernel's user can do with the mount: open a file by name for writing,
	// nothing else.
	_, st, _ = settleJob(t, s, `d=`+docker.ContainerJobOutDir+`
ls "$d" >/dev/null 2>&1 && echo listed
{ true > "$d/x"; } 2>/dev/null && echo created
mkfifo "$d/y" 2>/dev/null && echo made
ln -s / "$d/z" 2>/dev/null && echo linked
echo ok`, controller.JobOptions{}, time.Minute)
	if got := string(st.Output.Kept); got != "ok\n" {
		t.Errorf("through the job output mount the kernel's user could: %q", got)
	}
	left, _ := filepath.Glob(filepath.Join(s.SpillDir(), "jobout", "*"))
	if len(left) != 0 {
		t.Errorf("left in the job output directory: %v", left)
	}
}

// TestAContainerJobThatClosesItsStdoutEarly: the job closes its stdout while stderr goes on;
// both streams' bytes arrive and the job ends once.
func TestAContainerJobThatClosesItsStdoutEarly(t *testing.T) {
	s := startJobSession(t, docker.Options{}, 0)
	_, st, _ := settleJob(t, s, `echo out; exec 1>&-; sleep 0.3; echo err >&2; exit 7`, controller.JobOptions{}, time.Minute)
	if st.End.ExitCode == nil || *st.End.ExitCode != 7 {
		t.Fatalf("end %v, want exit 7", st.End)
	}
	if got := string(st.Output.Kept); got != "out\nerr\n" {
		t.Fatalf("output %q", got)
	}
}

// TestAHugeBurstFromAContainerJobIsCountedExactly: 256 MiB as fast as the job can write
// them: every byte counted (kept + dropped), none lost.
func TestAHugeBurstFromAContainerJobIsCountedExactly(t *testing.T) {
	s := startJobSession(t, docker.Options{}, 0)
	_, st, took := settleJob(t, s, `head -c 256M /dev/zero; echo tail`, controller.JobOptions{}, 5*time.Minute)
	const total = 256<<20 + 5
	r := st.Output
	if r.TotalBytes != total || r.KeptBytes+r.DroppedBytes != total || r.TotalLines != 1 || r.KeptLines+r.DroppedLines != 1 {
		t.Fatalf("total %d, kept %d + dropped %d, lines %d (kept %d, dropped %d); want %d bytes, 1 line", r.TotalBytes, r.KeptBytes, r.DroppedBytes, r.TotalLines, r.KeptLines, r.DroppedLines, int64(total))
	}
	t.Logf("256 MiB in %v", took)
}

// TestAContainerKernelThatCannotOpenItsFilesFallsBackToFrames: a kernel whose opens of
// the output files fail (a cell makes its stub's opener refuse) still delivers the job's
// exact output, through frames, and the controller's tail ends.
func TestAContainerKernelThatCannotOpenItsFilesFallsBackToFrames(t *testing.T) {
	s := startJobSession(t, docker.Options{}, 0)
	execCell(t, s, `import kennel._jobs as _j
_j._open_fifos = lambda job_id, out, err: (None, "refused by the test")`)
	_, st, _ := settleJob(t, s, `readlink /proc/$$/fd/1; echo err >&2`, controller.JobOptions{}, time.Minute)
	if got := string(st.Output.Kept); !strings.HasPrefix(got, "pipe:") || !strings.HasSuffix(got, "\nerr\n") {
		t.Fatalf("output %q, want a pipe and err", got)
	}
}

// TestAContainerKernelThatHoldsItsFiles: a hostile kernel that keeps a job's output
// files open after the job ended (it dups them) cannot hold the job: it ends at the
// kernel's job_end, with every byte the job wrote.
func TestAContainerKernelThatHoldsItsFiles(t *testing.T) {
	const grace = 500 * time.Millisecond
	s := startJobSession(t, docker.Options{}, grace)
	execCell(t, s, `import os, kennel._jobs as _j
_held = []
_open = _j._open_fifos
def _holding(job_id, out, err):
    fds, why = _open(job_id, out, err)
    if fds:
        _held.extend(os.dup(fd) for fd in fds)
    return fds, why
_j._open_fifos = _holding`)
	_, st, _ := settleJob(t, s, `echo held`, controller.JobOptions{}, time.Minute)
	if got := string(st.Output.Kept); got != "held\n" {
		t.Fatalf("output %q", got)
	}
	execCell(t, s, `assert len(_held) == 2, _held`)
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

// TestADetachedContainerGetsTheJobOutputDirectoryAndKeepsItAcrossReattach: a detached
// run-mode kernel's jobs write to the session's files too, and a kernel reached again
// from its record still names the directory (its container's mount).
func TestADetachedContainerGetsTheJobOutputDirectoryAndKeepsItAcrossReattach(t *testing.T) {
	o := docker.Options{RunDir: filepath.Join(t.TempDir(), "run"), StdinGrace: time.Second, StopGrace: time.Second}
	s := startJobSession(t, o, 0)
	_, st, _ := settleJob(t, s, `readlink /proc/$$/fd/1`, controller.JobOptions{}, time.Minute)
	if got := string(st.Output.Kept); !strings.HasPrefix(got, docker.ContainerJobOutDir+"/kennel-out-") {
		t.Fatalf("the detached kernel's job's stdout is %q, want a file in %s", got, docker.ContainerJobOutDir)
	}

	cli := dockerneed.KernelEngine(t)
	tr := newTransport(t, cli, o)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	jobOutDir := t.TempDir()
	k, err := tr.Start(ctx, transports.Spec{SessionID: "jobout-reattach", Dir: "/tmp", JobOutDir: jobOutDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Kill(context.Background()) })
	if got := k.Info().JobOutDir; got != docker.ContainerJobOutDir {
		t.Fatalf("started: Info.JobOutDir %q", got)
	}
	d := k.(transports.Detachable)
	rec := d.Record()
	if err := d.Detach(); err != nil {
		t.Fatal(err)
	}
	again, err := tr.Reattach(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = again.Kill(context.Background()) })
	if got := again.Info().JobOutDir; got != docker.ContainerJobOutDir {
		t.Fatalf("reattached: Info.JobOutDir %q", got)
	}
}
