package ssh_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/output"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/ssh"
	"github.com/kennel-dev/kennel/transports/ssh/sshtest"
	"github.com/kennel-dev/kennel/transports/transporttest"
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
// is a relay (its command line holds the relay's program), failing t after 10 s.
func noRelayLeft(t testing.TB, runDir string) {
	t.Helper()
	marker := []byte("KENNEL_REMOTE_RUN=" + path.Base(runDir))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		left := relays(marker)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay processes left: %v", left)
		}
	}
}

// relays are the pids of the relays marked with marker.
func relays(marker []byte) []string {
	var left []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bytes.Contains(env, marker) && bytes.Contains(cmdline, []byte("kennel-out-[0-9a-f]")) {
			left = append(left, e.Name())
		}
	}
	return left
}

// TestAnSSHJobsOutputComesOverAChannelOfItsOwn: a remote job's stdout and stderr are
// files in the kernel's run directory, relayed raw over an ssh session of their own (no
// job_output frame carries them); its exact bytes arrive from both streams, each in
// order, past the login profile's banner; the relay is gone once the job ended, and the
// files hold no disk.
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
			for _, l := range lines {
				if !strings.HasPrefix(l, runDir+"/kennel-out-") {
					t.Errorf("the job's fd is %q, want a file in %s", l, runDir)
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
			noFilesLeft(t, runDir)
			noRelayLeft(t, runDir)
		})
	}
}

// TestAnSSHJobThatClosesItsStdoutEarly: the job closes its stdout while stderr goes on;
// both streams' bytes arrive and the job ends once.
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

// TestAnSSHKernelThatCannotOpenItsFilesFallsBackToFrames: a kernel whose output file
// opens fail (a cell makes its stub's opener refuse) still delivers the job's exact
// output, through frames, and the relay ends.
func TestAnSSHKernelThatCannotOpenItsFilesFallsBackToFrames(t *testing.T) {
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

// TestAnSSHKernelThatHoldsItsFiles: a hostile kernel that keeps a job's output files
// open after the job ended (it dups them) cannot hold the job: it ends with every byte
// the job wrote, and the relay ends then too (a file's reader waits for no writer).
func TestAnSSHKernelThatHoldsItsFiles(t *testing.T) {
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
	noRelayLeft(t, runDir) // the relay ended, though the kernel holds the files
}

// noFilesLeft fails t if a job output file in runDir still holds disk: an ended job's
// files keep their names and sizes (what the job wrote) and no block of data.
func noFilesLeft(t testing.TB, runDir string) {
	t.Helper()
	left, _ := filepath.Glob(filepath.Join(runDir, "kennel-out-*"))
	for _, p := range left {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err == nil && st.Blocks != 0 {
			t.Errorf("job output file %s holds %d blocks after its job ended", p, st.Blocks)
		}
	}
}

// The transport-level tests below open job output on a kernel directly and play the job
// themselves: sshtest's host is this machine, so they append to the files the relay
// made, as the kernel's job would (O_WRONLY|O_APPEND).

// outputKernel starts a kernel on srv (attached or detached) and returns its job outputs
// and its run directory; the kernel is stopped at cleanup.
func outputKernel(t testing.TB, srv *sshtest.Server, detached bool) (transports.JobOutputs, string) {
	t.Helper()
	tr := ssh.New(newHosts(t, srv), ssh.Options{Target: sshtest.Alias, Detached: detached})
	k, _ := transporttest.Start(t, tr, transports.Spec{Dir: srv.Home})
	jo, ok := k.(transports.JobOutputs)
	if !ok {
		t.Fatalf("%T is not transports.JobOutputs", k)
	}
	id := k.Info().ID
	return jo, id[strings.LastIndex(id, ":")+1:]
}

// openOutput opens job output on jo with req (within 30 s), failing t on an error; the
// pair is closed at cleanup.
func openOutput(t testing.TB, jo transports.JobOutputs, req transports.JobOutputRequest) transports.JobOutput {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := jo.OpenJobOutput(ctx, req)
	if err != nil {
		t.Fatalf("open job output %+v: %v", req, err)
	}
	t.Cleanup(func() { out.Close() })
	return out
}

// pattern is a stream's content: byte o is pat[o%len(pat)], a period no chunk size
// divides, so a byte out of place (or a hole's zeros) shows.
type pattern []byte

func newPattern(seed byte) pattern {
	p := make(pattern, 1<<20+7)
	x := uint32(seed)*2654435761 + 1
	for i := range p {
		x = x*1664525 + 1013904223
		p[i] = byte(x >> 24)
	}
	return p
}

// at returns the n bytes from offset off.
func (p pattern) at(off int64, n int) []byte {
	b := make([]byte, 0, n)
	for len(b) < n {
		i := int(off % int64(len(p)))
		k := min(n-len(b), len(p)-i)
		b = append(b, p[i:i+k]...)
		off += int64(k)
	}
	return b
}

// matches reports whether b is the pattern's bytes from off.
func (p pattern) matches(off int64, b []byte) bool {
	for len(b) > 0 {
		i := int(off % int64(len(p)))
		k := min(len(b), len(p)-i)
		if !bytes.Equal(b[:k], p[i:i+k]) {
			return false
		}
		b, off = b[k:], off+int64(k)
	}
	return true
}

// appender is the job's end of one output file.
type appender struct {
	f   *os.File
	pat pattern
	n   int64 // bytes appended
}

func newAppender(t testing.TB, path string, pat pattern) *appender {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &appender{f: f, pat: pat}
}

// write appends the pattern's next n bytes.
func (a *appender) write(t testing.TB, n int) {
	t.Helper()
	if _, err := a.f.Write(a.pat.at(a.n, n)); err != nil {
		t.Fatal(err)
	}
	a.n += int64(n)
}

// reading reads one stream to its end in a goroutine, checking each byte against pat
// (the stream's offsets past gap mapped past it, as the file holds them).
type reading struct {
	n    atomic.Int64
	err  error // the stream's end (nil: io.EOF), or the first byte out of place
	done chan struct{}
}

func readStream(r io.Reader, pat pattern, gap *transports.Gap) *reading {
	rd := &reading{done: make(chan struct{})}
	go func() {
		defer close(rd.done)
		buf := make([]byte, 256<<10)
		for {
			n, err := r.Read(buf)
			for b := buf[:n]; len(b) > 0; {
				off := rd.n.Load()
				k := len(b)
				if gap != nil && off < gap.At {
					k = min(k, int(gap.At-off))
				}
				if gap != nil && off >= gap.At {
					off += gap.N
				}
				if !pat.matches(off, b[:k]) {
					rd.err = fmt.Errorf("bytes out of place at stream offset %d (file offset %d)", rd.n.Load(), off)
					return
				}
				rd.n.Add(int64(k))
				b = b[k:]
			}
			if err != nil {
				if err != io.EOF {
					rd.err = err
				}
				return
			}
		}
	}()
	return rd
}

// wait waits for the stream's end (at most d) and fails t unless it ended cleanly with
// want bytes.
func (rd *reading) wait(t testing.TB, what string, want int64, d time.Duration) {
	t.Helper()
	select {
	case <-rd.done:
	case <-time.After(d):
		t.Fatalf("%s: no end within %v (%d bytes read, want %d)", what, d, rd.n.Load(), want)
	}
	if rd.err != nil || rd.n.Load() != want {
		t.Fatalf("%s: %d bytes, want %d: %v", what, rd.n.Load(), want, rd.err)
	}
}

// until waits for rd to have read n bytes (at most d).
func (rd *reading) until(t testing.TB, what string, n int64, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); rd.n.Load() < n; time.Sleep(time.Millisecond) {
		select {
		case <-rd.done:
			t.Fatalf("%s ended after %d bytes, want %d: %v", what, rd.n.Load(), n, rd.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d bytes within %v, want %d", what, rd.n.Load(), d, n)
		}
	}
}

// allocated is the disk path's file holds (st_blocks).
func allocated(t testing.TB, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// TestAJobsOutputFilesAreStreamedExactly: OpenJobOutput makes two empty regular files
// (0600, kennel-out-<32 hex>-stdout/-stderr) in the kernel's run directory; what the job
// appends to each, in bursts and pauses, arrives exact and in order on its stream; End
// ends both streams with every byte, removes the files, and leaves no relay.
func TestAJobsOutputFilesAreStreamedExactly(t *testing.T) {
	srv := sshtest.Start(t)
	for _, detached := range []bool{false, true} {
		t.Run(fmt.Sprintf("detached=%v", detached), func(t *testing.T) {
			jo, runDir := outputKernel(t, srv, detached)
			out := openOutput(t, jo, transports.JobOutputRequest{Keep: 1 << 20})
			if g := out.Gaps(); g != [2]*transports.Gap{} {
				t.Fatalf("a new job's gaps %v", g)
			}
			paths := [2]string{}
			paths[0], paths[1] = out.Paths()
			name := regexp.MustCompile(`^kennel-out-[0-9a-f]{32}-(stdout|stderr)$`)
			for i, p := range paths {
				st, err := os.Lstat(p)
				if err != nil || path.Dir(p) != runDir || !name.MatchString(path.Base(p)) || !strings.HasSuffix(p, []string{"-stdout", "-stderr"}[i]) ||
					!st.Mode().IsRegular() || st.Mode().Perm() != 0o600 || st.Size() != 0 {
					t.Fatalf("path %q (%v, %v): want an empty 0600 file kennel-out-<hex>-std... in %s", p, st, err, runDir)
				}
			}
			pats := [2]pattern{newPattern(1), newPattern(2)}
			ws := [2]*appender{newAppender(t, paths[0], pats[0]), newAppender(t, paths[1], pats[1])}
			rs := [2]*reading{readStream(out.Stdout(), pats[0], nil), readStream(out.Stderr(), pats[1], nil)}
			for i, n := range []int{1, 4096, 3 << 20, 17, 1 << 20, 5} {
				ws[i%2].write(t, n)
				ws[(i+1)%2].write(t, n/3+1)
				if i%2 == 0 {
					rs[i%2].until(t, "stdout", ws[i%2].n, 30*time.Second) // the relay waits at the end, and goes on
				}
			}
			out.End()
			rs[0].wait(t, "stdout", ws[0].n, 30*time.Second)
			rs[1].wait(t, "stderr", ws[1].n, 30*time.Second)
			noFilesLeft(t, runDir) // each file one hole, its size kept
			noRelayLeft(t, runDir)
			// A relay after the end (of a controller that died before it recorded the
			// end) counts every byte as lost, none as read.
			again, err := jo.OpenJobOutput(testCtx(t), transports.JobOutputRequest{Resume: paths})
			if err != nil {
				t.Fatal(err)
			}
			for i, g := range again.Gaps() {
				if g == nil || g.At != 0 || g.N != ws[i].n {
					t.Errorf("stream %d after the end: gap %+v, want all %d bytes", i, g, ws[i].n)
				}
			}
			again.End()
			_ = again.Close()
		})
	}
}

// TestAHugeBurstThroughJobOutputFilesIsExactAndSmallOnDisk: 256 MiB appended to stdout
// while it is read (and 1 MiB to stderr) arrive exact; with Keep 1 MiB the file's disk
// stays bounded by Keep, the relay's punch batch and what is not streamed yet, and is
// Keep once the relay caught up, though its size is the whole.
func TestAHugeBurstThroughJobOutputFilesIsExactAndSmallOnDisk(t *testing.T) {
	srv := sshtest.Start(t)
	jo, runDir := outputKernel(t, srv, false)
	const keep, total, ahead = 1 << 20, 256 << 20, 8 << 20
	out := openOutput(t, jo, transports.JobOutputRequest{Keep: keep})
	stdout, stderr := out.Paths()
	pats := [2]pattern{newPattern(3), newPattern(4)}
	w, we := newAppender(t, stdout, pats[0]), newAppender(t, stderr, pats[1])
	r, re := readStream(out.Stdout(), pats[0], nil), readStream(out.Stderr(), pats[1], nil)
	t0 := time.Now()
	var most int64
	for w.n < total {
		for w.n-r.n.Load() > ahead { // the job writes as fast as the relay streams
			select {
			case <-r.done:
				t.Fatalf("stdout ended after %d bytes: %v", r.n.Load(), r.err)
			case <-time.After(time.Millisecond):
			}
		}
		w.write(t, 1<<20)
		if we.n < 1<<20 {
			we.write(t, 64<<10)
		}
		most = max(most, allocated(t, stdout))
	}
	r.until(t, "stdout", total, time.Minute)
	took := time.Since(t0)
	// Within Keep, a 4 MiB batch, what was ahead of the relay and a 1 MiB read.
	if bound := int64(keep + 4<<20 + ahead + 2<<20); most > bound {
		t.Errorf("the stdout file held %d bytes of disk at most, want at most %d", most, bound)
	}
	var idle int64
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if idle = allocated(t, stdout); idle <= keep+64<<10 || time.Now().After(deadline) {
			break
		}
	}
	if st, err := os.Stat(stdout); err != nil || st.Size() != total || idle > keep+64<<10 {
		t.Errorf("the caught-up stdout file: %v, %v, %d bytes of disk; want size %d and at most %d of disk", st, err, idle, total, keep+64<<10)
	}
	out.End()
	r.wait(t, "stdout", total, 30*time.Second)
	re.wait(t, "stderr", we.n, 30*time.Second)
	noFilesLeft(t, runDir)
	noRelayLeft(t, runDir)
	t.Logf("256 MiB in %v (%.0f MB/s); at most %d KiB of disk, %d KiB caught up", took, total/took.Seconds()/1e6, most>>10, idle>>10)
}

// TestJobOutputOutlivesItsReaderAndIsResumed: a reader that goes away (Close: its
// controller gone) leaves the files and the job appending to them; a second reader
// (Resume, the same Keep) streams them again from their start: what the first punched
// is its Gap, and the stream plus the gap is exactly what the job wrote.
func TestJobOutputOutlivesItsReaderAndIsResumed(t *testing.T) {
	srv := sshtest.Start(t)
	for _, detached := range []bool{false, true} {
		t.Run(fmt.Sprintf("detached=%v", detached), func(t *testing.T) {
			jo, runDir := outputKernel(t, srv, detached)
			const keep = 100 << 10 // 128 KiB kept: Keep rounded up to whole blocks
			first := openOutput(t, jo, transports.JobOutputRequest{Keep: keep})
			paths := [2]string{}
			paths[0], paths[1] = first.Paths()
			pats := [2]pattern{newPattern(5), newPattern(6)}
			w, we := newAppender(t, paths[0], pats[0]), newAppender(t, paths[1], pats[1])
			r, re := readStream(first.Stdout(), pats[0], nil), readStream(first.Stderr(), pats[1], nil)
			for range 9 {
				w.write(t, 1<<20)
			}
			w.write(t, 1000)
			we.write(t, 5000)
			r.until(t, "first stdout", w.n, 30*time.Second)
			re.until(t, "first stderr", we.n, 30*time.Second)
			for deadline := time.Now().Add(5 * time.Second); allocated(t, paths[0]) > 1<<20; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the first reader punched nothing: %d bytes of disk", allocated(t, paths[0]))
				}
			}
			first.Close()
			for _, rd := range []*reading{r, re} {
				select { // it ends with io.EOF or another error
				case <-rd.done:
				case <-time.After(10 * time.Second):
					t.Fatal("a stream did not end after Close")
				}
			}
			noRelayLeft(t, runDir)

			// The job goes on: a file has no reader to lose.
			w.write(t, 3<<20+11)
			we.write(t, 7)
			second := openOutput(t, jo, transports.JobOutputRequest{Keep: keep, Resume: paths})
			if p0, p1 := second.Paths(); [2]string{p0, p1} != paths {
				t.Fatalf("resumed paths %q %q, want %q", p0, p1, paths)
			}
			gaps := second.Gaps()
			const at, end = 128 << 10, (9<<20 + 1000) / (64 << 10) * (64 << 10)
			if gaps[0] == nil || *gaps[0] != (transports.Gap{At: at, N: end - at}) || gaps[1] != nil {
				t.Fatalf("gaps %v %v, want stdout's {%d %d} and none on stderr", gaps[0], gaps[1], at, end-at)
			}
			r2, re2 := readStream(second.Stdout(), pats[0], gaps[0]), readStream(second.Stderr(), pats[1], nil)
			w.write(t, 12345) // while the second reads
			second.End()
			r2.wait(t, "resumed stdout", w.n-gaps[0].N, 30*time.Second)
			re2.wait(t, "resumed stderr", we.n, 30*time.Second)
			noFilesLeft(t, runDir)
			noRelayLeft(t, runDir)
		})
	}
}

// TestAResumeWaitsForTheReaderBeforeIt: while an earlier relay still reads a pair (its
// controller's end not seen on the host yet), a resume waits for it rather than read
// under its punches: within its open's bound it fails (errdefs.ErrUnavailable); once the
// earlier one is closed it opens. Files that are gone are errdefs.ErrNotFound.
func TestAResumeWaitsForTheReaderBeforeIt(t *testing.T) {
	srv := sshtest.Start(t)
	jo, runDir := outputKernel(t, srv, false)
	first := openOutput(t, jo, transports.JobOutputRequest{Keep: 1 << 20})
	paths := [2]string{}
	paths[0], paths[1] = first.Paths()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	_, err := jo.OpenJobOutput(ctx, transports.JobOutputRequest{Keep: 1 << 20, Resume: paths})
	cancel()
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "another relay") {
		t.Fatalf("resume while the first relay holds the files: %v, want errdefs.ErrUnavailable", err)
	}
	first.Close()
	second := openOutput(t, jo, transports.JobOutputRequest{Keep: 1 << 20, Resume: paths})
	second.Close()

	gone := [2]string{runDir + "/kennel-out-" + strings.Repeat("ab", 16) + "-stdout", runDir + "/kennel-out-" + strings.Repeat("ab", 16) + "-stderr"}
	if _, err := jo.OpenJobOutput(testCtx(t), transports.JobOutputRequest{Resume: gone}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("resume of files that are gone: %v, want errdefs.ErrNotFound", err)
	}
	noRelayLeft(t, runDir)
}

// TestHostileResumePathsAreRefused: a Resume naming files outside the run directory (by
// path or by ..), a symlink, a FIFO, a name not of a job's output or two halves of
// different pairs is refused (errdefs.ErrInvalidArgument), and nothing is touched.
func TestHostileResumePathsAreRefused(t *testing.T) {
	srv := sshtest.Start(t)
	jo, runDir := outputKernel(t, srv, false)
	outside := t.TempDir()
	hex := strings.Repeat("0f", 16)
	pair := func(dir, h string) [2]string {
		return [2]string{dir + "/kennel-out-" + h + "-stdout", dir + "/kennel-out-" + h + "-stderr"}
	}
	mk := func(p string) {
		if err := os.WriteFile(p, []byte("precious "+p), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ours := pair(runDir, hex)
	mk(ours[1])
	victim := filepath.Join(outside, "victim")
	mk(victim)
	for _, p := range pair(outside, hex) {
		mk(p)
	}
	if err := os.Symlink(victim, ours[0]); err != nil {
		t.Fatal(err)
	}
	fifo := pair(runDir, strings.Repeat("1e", 16))
	if err := syscall.Mkfifo(fifo[0], 0o600); err != nil {
		t.Fatal(err)
	}
	mk(fifo[1])
	other := pair(runDir, strings.Repeat("2d", 16))
	for _, p := range other {
		mk(p)
	}
	notOurs := [2]string{runDir + "/notes-stdout", runDir + "/notes-stderr"}
	for _, p := range notOurs {
		mk(p)
	}
	before := snapshot(t, runDir, outside)
	for name, resume := range map[string][2]string{
		"outside":     pair(outside, hex),
		"dotdot":      pair(runDir+"/../"+path.Base(runDir), strings.Repeat("2d", 16)),
		"symlink":     ours,
		"fifo":        fifo,
		"not ours":    notOurs,
		"two pairs":   {other[0], ours[1]},
		"relative":    {"kennel-out-" + hex + "-stdout", "kennel-out-" + hex + "-stderr"},
		"swapped":     {other[1], other[0]},
		"one missing": {other[0], ""},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := jo.OpenJobOutput(testCtx(t), transports.JobOutputRequest{Keep: 1 << 20, Resume: resume})
			if err == nil {
				out.Close()
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("resume %q: %v, want errdefs.ErrInvalidArgument", resume, err)
			}
			t.Logf("%v", err)
		})
	}
	noRelayLeft(t, runDir)
	if after := snapshot(t, runDir, outside); after != before {
		t.Fatalf("a refused resume touched files:\nbefore %s\nafter  %s", before, after)
	}
}

// snapshot lists the entries of dirs with their kind, mode, size, time and content.
func snapshot(t testing.TB, dirs ...string) string {
	t.Helper()
	var b strings.Builder
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			p := filepath.Join(d, e.Name())
			st, err := os.Lstat(p)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s %v %d %d", p, st.Mode(), st.Size(), st.ModTime().UnixNano())
			if st.Mode().IsRegular() {
				data, _ := os.ReadFile(p)
				fmt.Fprintf(&b, " %q", data)
			}
			b.WriteString("; ")
		}
	}
	return b.String()
}
