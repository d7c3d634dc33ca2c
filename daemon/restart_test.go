package daemon_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/kennel-dev/kennel/launch"
	ctrd "github.com/kennel-dev/kennel/transports/containerd"
	"github.com/kennel-dev/kennel/transports/containerd/containerdtest"

	"github.com/kennel-dev/kennel/api"
	kclient "github.com/kennel-dev/kennel/client"
	"github.com/kennel-dev/kennel/daemon"
	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/store"
)

// TestARestartedDaemonResumesItsSessions: a daemon stopped gracefully lets its kernels
// run on; the next daemon on the same state directory serves every session again with
// its id, its kernel (the same process) and its namespace. A kernel that ended while no
// daemon ran is replaced by a fresh one, and the session says its namespace was lost; a
// deleted session stays deleted; --stop-kernels ends every kernel.
func TestARestartedDaemonResumesItsSessions(t *testing.T) {
	state := filepath.Join(shortDir(t), "state")
	ctx := context.Background()
	start := func(stop bool) *running {
		return serveDetaching(t, daemon.Options{StateDir: state, StopKernels: stop})
	}
	r := start(false)
	var ids []string
	var pids []int
	for i := range 3 {
		s := r.newSession(t)
		if _, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "x = " + string(rune('1'+i))}); err != nil {
			t.Fatal(err)
		}
		got, err := r.c.Session(ctx, s.ID)
		if err != nil || got.Kernel.PID == nil {
			t.Fatalf("session %s: %+v, %v", s.ID, got, err)
		}
		ids, pids = append(ids, s.ID), append(pids, *got.Kernel.PID)
	}
	r.stop()
	for _, pid := range pids {
		if !alive(pid) {
			t.Fatalf("kernel %d ended with the daemon's graceful stop", pid)
		}
	}

	r = start(false)
	for i, id := range ids {
		// The session answers at once; its cell waits for the kernel's reattach.
		got, err := r.c.Session(ctx, id)
		if err != nil || got.Kernel.State == nil || (*got.Kernel.State != "reattaching" && *got.Kernel.State != "running") {
			t.Fatalf("session %s after the restart: %+v, %v; want it reattaching or running", id, got, err)
		}
		res, err := r.c.RunCell(ctx, id, api.RunCell{Code: "x"})
		if err != nil || res.Cell == nil || res.Cell.Result == nil || *res.Cell.Result != string(rune('1'+i)) {
			t.Fatalf("x in resumed session %s: %+v, %v", id, res, err)
		}
		got, err = r.c.Session(ctx, id)
		if err != nil || got.Kernel.Origin == nil || *got.Kernel.Origin != "resumed" || got.Kernel.PID == nil || *got.Kernel.PID != pids[i] {
			t.Fatalf("session %s after the restart: kernel %+v, %v; want pid %d resumed", id, got.Kernel, err, pids[i])
		}
	}
	if err := r.c.DeleteSession(ctx, ids[2]); err != nil {
		t.Fatal(err)
	}
	r.stop()
	if err := testproc.Kill(pids[1], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); alive(pids[1]) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}

	r = start(true)
	list, err := r.c.Sessions(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("sessions after the second restart: %+v, %v; want the two not deleted", list, err)
	}
	var got *api.Session
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if got, err = r.c.Session(ctx, ids[1]); err != nil {
			t.Fatal(err)
		}
		if *got.Kernel.State != "reattaching" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still reattaching after 20 s")
		}
	}
	if *got.Kernel.State != "lost" || got.Kernel.Lost == nil || got.Kernel.PID != nil {
		t.Fatalf("the session whose kernel was killed, before a cell: %+v; want state lost with the reason, no kernel started", got.Kernel)
	}
	res, err := r.c.RunCell(ctx, ids[1], api.RunCell{Code: "'x' in dir()"})
	if err != nil || res.Cell == nil || res.Cell.Result == nil || *res.Cell.Result != "False" || res.Lost == nil {
		t.Fatalf("a fresh kernel's namespace: %+v, %v; want False and the notice that the namespace was lost", res, err)
	}
	t.Logf("the cell's notice: %s", *res.Lost)
	got, err = r.c.Session(ctx, ids[1])
	if err != nil || got.Kernel.Lost == nil || got.Kernel.Origin == nil || *got.Kernel.Origin != "fresh" {
		t.Fatalf("the session whose kernel was killed: %+v, %v; want a fresh kernel and why the old was lost", got, err)
	}
	t.Logf("lost: %s", *got.Kernel.Lost)
	fresh := *got.Kernel.PID
	r.stop()
	for _, pid := range []int{pids[0], fresh} {
		for deadline := time.Now().Add(10 * time.Second); alive(pid) && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if alive(pid) {
			t.Errorf("kernel %d outlived a --stop-kernels shutdown", pid)
		}
	}
	if _, err := os.Stat(filepath.Join(state, "state.db")); err != nil {
		t.Fatal(err)
	}
}

// TestAKeyedCellRunsOnceAcrossARestart: a cell sent under an Idempotency-Key runs once:
// retried while it runs, after the daemon that sent it stopped mid-cell and another
// resumed its kernel, and after it ended, every answer is that one run's (its counter
// increment happened once). With the kernel gone, a cell the earlier daemon sent is
// "unknown" and is not run again.
func TestAKeyedCellRunsOnceAcrossARestart(t *testing.T) {
	state := filepath.Join(shortDir(t), "state")
	ctx := context.Background()
	zero := int64(0)
	code := "import time; time.sleep(1.5)\ncounter = globals().get('counter', 0) + 1\ncounter"
	r := serveDetaching(t, daemon.Options{StateDir: state})
	s := r.newSession(t)
	rep, err := r.c.RunCellOnce(ctx, s.ID, "k1", api.RunCell{Code: code, BudgetMS: &zero})
	if err != nil || rep.State != "backgrounded" {
		t.Fatalf("the first send: %+v, %v", rep, err)
	}
	if rep, err = r.c.RunCellOnce(ctx, s.ID, "k1", api.RunCell{Code: "other"}); err == nil {
		t.Fatalf("another cell under the same key: %+v, want a conflict", rep)
	}
	r.stop() // mid-cell: the kernel runs on

	r = serveDetaching(t, daemon.Options{StateDir: state})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		rep, err = r.c.RunCellOnce(ctx, s.ID, "k1", api.RunCell{Code: code})
		if err != nil {
			t.Fatal(err)
		}
		if rep.State == "settled" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the keyed cell never settled after the restart: %+v", rep)
		}
	}
	if rep.Cell == nil || rep.Cell.Result == nil || *rep.Cell.Result != "1" {
		t.Fatalf("the keyed cell after the restart: %+v", rep)
	}
	if rep, err = r.c.RunCellOnce(ctx, s.ID, "k1", api.RunCell{Code: code}); err != nil || rep.Cell == nil || *rep.Cell.Result != "1" {
		t.Fatalf("a retry after the end: %+v, %v", rep, err)
	}
	got, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "counter"})
	if err != nil || got.Cell == nil || *got.Cell.Result != "1" {
		t.Fatalf("the counter: %+v, %v; want the cell run once", got, err)
	}

	// A cell sent, then its kernel killed while no daemon runs: unknown, not run again.
	if rep, err = r.c.RunCellOnce(ctx, s.ID, "k2", api.RunCell{Code: code, BudgetMS: &zero}); err != nil || rep.State != "backgrounded" {
		t.Fatalf("k2: %+v, %v", rep, err)
	}
	view, _ := r.c.Session(ctx, s.ID)
	r.stop()
	if err := testproc.Kill(*view.Kernel.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r = serveDetaching(t, daemon.Options{StateDir: state, StopKernels: true})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if rep, err = r.c.RunCellOnce(ctx, s.ID, "k2", api.RunCell{Code: code}); err != nil {
			t.Fatal(err)
		}
		if rep.State == "unknown" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("k2 after its kernel was lost: %+v, want unknown", rep)
		}
	}
	if got, err = r.c.RunCell(ctx, s.ID, api.RunCell{Code: "'counter' in dir()"}); err != nil || got.Cell == nil || *got.Cell.Result != "False" {
		t.Fatalf("the fresh kernel ran the unknown cell: %+v, %v", got, err)
	}
}

// TestARestartedDaemonResumesADockerKernelAndSweepsOneNoRecordHolds: two Docker sessions
// let go by a graceful stop; one is forgotten by the store meanwhile. The next daemon
// resumes the other (its container, its namespace) and its sweep removes the container
// no record holds.
func TestARestartedDaemonResumesADockerKernelAndSweepsOneNoRecordHolds(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	state := filepath.Join(shortDir(t), "state")
	ctx := context.Background()
	r := serveDetaching(t, daemon.Options{StateDir: state})
	var ids []string
	for range 2 {
		s, err := r.c.CreateSession(ctx, api.CreateSession{Cwd: t.TempDir(), Transport: &api.Transport{Docker: &api.Docker{}}}, kclient.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "x = 'kept'"}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	r.stop()
	for _, id := range ids {
		if n := containersOf(t, cli, id); n != 1 {
			t.Fatalf("session %s: %d containers after the graceful stop, want its one running on", id, n)
		}
	}
	st, err := store.Open(store.DefaultPath(state))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ids[1]); err != nil {
		t.Fatal(err)
	}
	st.Close()

	r = serveDetaching(t, daemon.Options{StateDir: state, StopKernels: true})
	rep, err := r.c.RunCell(ctx, ids[0], api.RunCell{Code: "x"})
	if err != nil || rep.Cell == nil || rep.Cell.Result == nil || *rep.Cell.Result != "'kept'" {
		t.Fatalf("the resumed Docker session: %+v, %v", rep, err)
	}
	for deadline := time.Now().Add(30 * time.Second); containersOf(t, cli, ids[1]) != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the container no record holds (session %s) is still there 30 s after the restart", ids[1])
		}
	}
	r.stop()
	if n := containersOf(t, cli, ids[0]); n != 0 {
		t.Fatalf("%d containers left after a --stop-kernels shutdown", n)
	}
}

// TestJobsAndTheirOutputAnswerAfterARestart: jobs an earlier daemon ran are listed after
// a restart and their output read: an ended one as it ended, with its bytes; one still
// running when the daemon stopped is picked up by the next (running, in its table) and
// stopped from there.
func TestJobsAndTheirOutputAnswerAfterARestart(t *testing.T) {
	state := filepath.Join(shortDir(t), "state")
	ctx := context.Background()
	r := serveDetaching(t, daemon.Options{StateDir: state})
	s := r.newSession(t)
	done, err := r.c.RunJob(ctx, s.ID, "printf 'line one\\nline two\\n'; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	waitJobState(t, r, s.ID, done.ID, "ended")
	running, err := r.c.RunJob(ctx, s.ID, "sleep 1000")
	if err != nil {
		t.Fatal(err)
	}
	r.stop()

	r = serveDetaching(t, daemon.Options{StateDir: state, StopKernels: true})
	list, err := r.c.Jobs(ctx, s.ID)
	if err != nil || len(list) != 2 {
		t.Fatalf("jobs after the restart: %+v, %v; want the two the earlier daemon ran", list, err)
	}
	byID := map[string]api.Job{list[0].ID: list[0], list[1].ID: list[1]}
	if j := byID[done.ID]; j.State != "ended" || j.End == nil || j.End.ExitCode == nil || *j.End.ExitCode != 3 {
		t.Fatalf("the ended job after the restart: %+v", j)
	}
	if j := byID[running.ID]; j.State != "running" {
		t.Fatalf("the job running at the stop, after the restart: %+v; want it picked up, running", j)
	}
	page, err := r.c.Output(ctx, s.ID, done.ID, 0, 1<<16)
	if err != nil || string(page.Data) != "line one\nline two\n" || !page.EOF {
		t.Fatalf("the ended job's output after the restart: %+v, %v", page, err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, err := r.c.StopJob(ctx, s.ID, running.ID)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the picked-up job could not be stopped: %v", err)
		}
	}
	if j := waitJobState(t, r, s.ID, running.ID, "ended"); j.End == nil || !j.End.Killed {
		t.Fatalf("the stopped job: %+v", j)
	}
}

// TestAJobRunsOnAcrossARestartAndItsOutputIsWhole: a job writing 300 numbered lines
// while the daemon stops and a new one starts (the kernel detached with the job running,
// its output going to files nobody reads meanwhile) is picked up by the next daemon and
// ends there with exit 0, its output byte for byte what it wrote, none lost or twice.
func TestAJobRunsOnAcrossARestartAndItsOutputIsWhole(t *testing.T) {
	state := filepath.Join(shortDir(t), "state")
	ctx := context.Background()
	r := serveDetaching(t, daemon.Options{StateDir: state})
	s := r.newSession(t)
	j, err := r.c.RunJob(ctx, s.ID, "i=0; while [ $i -lt 300 ]; do echo line $i; i=$((i+1)); sleep 0.01; done")
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := range 300 {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		p, err := r.c.Output(ctx, s.ID, j.ID, 0, 16)
		if err == nil && len(p.Data) > 0 {
			break // it writes
		}
		if time.Now().After(deadline) {
			t.Fatalf("no output from the job: %v", err)
		}
	}
	r.stop()
	time.Sleep(500 * time.Millisecond) // it writes on with nobody reading

	r = serveDetaching(t, daemon.Options{StateDir: state, StopKernels: true})
	end := waitJobState(t, r, s.ID, j.ID, "ended")
	if end.End == nil || end.End.ExitCode == nil || *end.End.ExitCode != 0 {
		t.Fatalf("the job after the restart: %+v", end)
	}
	var got []byte
	for off := int64(0); ; {
		p, err := r.c.Output(ctx, s.ID, j.ID, off, 1<<16)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.Data...)
		off += int64(len(p.Data))
		if p.EOF {
			break
		}
	}
	if string(got) != want.String() {
		t.Fatalf("the job's output across the restart: %d bytes, want %d; first difference at %d", len(got), want.Len(), firstDiff(got, []byte(want.String())))
	}
}

// waitJobState waits up to 30 s for job id of session sid to be in state, and returns it.
func waitJobState(t *testing.T, r *running, sid, id, state string) api.Job {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		list, err := r.c.Jobs(context.Background(), sid)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range list {
			if j.ID == id && j.State == state {
				return j
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s did not reach %s: %+v", id, state, list)
		}
	}
}

// firstDiff is the first offset where a and b differ.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestARestartedDaemonResumesAContainerdKernel: a containerd session let go by a graceful
// stop keeps its task (containerd's shim holds it); the next daemon reattaches from the
// record across the container boundary with the namespace intact, and a --stop-kernels
// shutdown then leaves no container, task or snapshot.
func TestARestartedDaemonResumesAContainerdKernel(t *testing.T) {
	d := containerdtest.Own(t)
	state := filepath.Join(shortDir(t), "state")
	kit := func() *launch.Kit {
		k := launch.New(launch.Options{RunDir: daemon.KernelRunDir(state)})
		t.Cleanup(func() { _ = k.Close() })
		return k
	}
	ctx := context.Background()
	r := serveDetaching(t, daemon.Options{StateDir: state, Kit: kit()})
	s, err := r.c.CreateSession(ctx, api.CreateSession{Cwd: t.TempDir(), Transport: &api.Transport{Containerd: &api.Containerd{Address: d.Address}}}, kclient.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "x = 'kept'"}); err != nil {
		t.Fatal(err)
	}
	r.stop()
	nctx := namespaces.WithNamespace(ctx, ctrd.Namespace)
	if cs, err := d.Client.Containers(nctx); err != nil || len(cs) != 1 {
		t.Fatalf("%d containers after the graceful stop (%v), want the kernel's running on", len(cs), err)
	}
	r = serveDetaching(t, daemon.Options{StateDir: state, StopKernels: true, Kit: kit()})
	rep, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "x"})
	if err != nil || rep.Cell == nil || rep.Cell.Result == nil || *rep.Cell.Result != "'kept'" {
		t.Fatalf("the resumed containerd session: %+v, %v", rep, err)
	}
	r.stop()
	if cs, err := d.Client.Containers(nctx); err != nil || len(cs) != 0 {
		for _, c := range cs {
			l, _ := c.Labels(nctx)
			t.Logf("left: %s %v", c.ID(), l)
		}
		t.Fatalf("%d containers after a --stop-kernels shutdown (%v); daemon log:\n%s", len(cs), err, r.logs.String())
	}
}
