package transporttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/link"
	"github.com/kennel-dev/kennel/transports"
)

// testCase is one row of the conformance table.
type testCase struct {
	name string
	run  func(t *testing.T, s *suite)
}

var cases = []testCase{
	{"Hello", testHello},
	{"CellRoundTrip", testCellRoundTrip},
	{"Env", testEnv},
	{"HostEnv", testHostEnv},
	{"Cwd", testCwd},
	{"StdinEOF", testStdinEOF},
	{"KillLeavesNothing", testKillLeavesNothing},
	{"KillBusyKernel", testKillBusyKernel},
	{"KillTwiceAndConcurrently", testKillTwice},
	{"SignalDeath", testSignalDeath},
	{"StartFailures", testStartFailures},
	{"EnvPrecedence", testEnvPrecedence},
	{"SpecRefused", testSpecRefused},
	{"CutAndReattach", testCutAndReattach},
	{"DetachAndReattach", testDetachAndReattach},
	{"HostCallAcrossACut", testHostCallAcrossACut},
	{"HostCallOfAReplacedController", testHostCallOfAReplacedController},
}

func testHello(t *testing.T, s *suite) {
	tr := s.newTransport(t)
	ss := s.start(t, tr, s.spec(t))
	info := ss.k.Info()
	if info.Transport != tr.Name() {
		t.Errorf("Info.Transport %q, want %q", info.Transport, tr.Name())
	}
	caps := tr.Capabilities()
	if info.HostPIDs != caps.HostPIDs {
		t.Errorf("Info.HostPIDs %v, Capabilities.HostPIDs %v", info.HostPIDs, caps.HostPIDs)
	}
	pid, _ := ss.hello.Fields["pid"].(float64)
	if caps.HostPIDs {
		if int(pid) != info.PID {
			t.Errorf("hello pid %v, Info.PID %d", pid, info.PID)
		}
		if _, ok := identify(info.PID); !ok {
			t.Errorf("Info.PID %d is not a live host process", info.PID)
		}
	} else if info.PID != 0 {
		t.Errorf("Info.PID %d, want 0 without host pids", info.PID)
	}
}

func testCellRoundTrip(t *testing.T, s *suite) {
	ss := s.start(t, s.newTransport(t), s.spec(t))
	done, out := ss.execute(t, "print('hi from the kernel')\n6 * 7")
	if done.Str("status") != "ok" || done.Str("result") != "42" {
		t.Fatalf("done %s: want status ok, result 42", done.Raw)
	}
	if out != "hi from the kernel\n" {
		t.Errorf("stdout %q", out)
	}
	// Cells share one namespace and run in order.
	ss.value(t, "x = 5")
	if got := ss.value(t, "x + 1"); got != "6" {
		t.Errorf("x + 1 = %s, want 6", got)
	}
	done, _ = ss.execute(t, "1/0")
	if done.Str("status") != "error" {
		t.Errorf("a failing cell: %s", done.Raw)
	}
}

// A detached kernel's connection is cut while a cell sleeps: its link reattaches, the
// cell's output and done arrive once, and the namespace is intact. Only for transports
// whose kernels are Detached (they expose their link.Client as Link).
func testCutAndReattach(t *testing.T, s *suite) {
	ss, l := startDetached[interface{ Link() *link.Client }](t, s, "no link to cut", "has no Link")
	ss.value(t, "before = 41")
	id, err := ss.c.Send("x = before + 1\nimport time; time.sleep(1.5)\nprint(x)")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	l.Link().Drop()
	out := outputUntilDone(t, ss.c, id, "after the cut", nil)
	if out != "42\n" {
		t.Fatalf("output %q across the cut, want it once", out)
	}
	if got := ss.value(t, "x + before"); got != "83" {
		t.Fatalf("the namespace after the reattach: x + before = %s, want 83", got)
	}
	if n := l.Link().Attaches(); n < 2 {
		t.Fatalf("%d attaches: the cut did not cut", n)
	}
}

// A host call in flight when a detached kernel's connection is cut is seen once and
// answered once: the request came before the cut, the reply goes after it (through the
// link's outbox), and the cell that waited on it prints the answer once. Only for
// transports whose kernels are Detached.
func testHostCallAcrossACut(t *testing.T, s *suite) {
	ss, l := startDetached[interface{ Link() *link.Client }](t, s, "no link to cut", "has no Link")
	id, err := ss.c.Send("import kennel\nr = kennel.host_request('echo', n=7)\nprint('answer', r['n'])")
	if err != nil {
		t.Fatal(err)
	}
	requests := 0
	out := outputUntilDone(t, ss.c, id, "waiting for the host call", func(f Frame) {
		if f.Event() != "host_request" {
			return
		}
		requests++
		l.Link().Drop()
		reply, _ := json.Marshal(map[string]any{"type": "host_reply", "id": f.ID(), "status": "ok", "result": map[string]any{"n": 7}})
		if _, err := ss.k.Stdin().Write(append(reply, '\n')); err != nil {
			t.Fatal(err)
		}
	})
	if requests != 1 || out != "answer 7\n" {
		t.Fatalf("%d host requests seen, output %q: want the request once and its answer once", requests, out)
	}
	if n := l.Link().Attaches(); n < 2 {
		t.Fatalf("%d attaches: the cut did not cut", n)
	}
}

// A detached kernel let go mid-cell is reached again from its Record by a fresh
// Transport (what a restarted controller has): the late cell's output and done arrive
// once, the namespace is intact; once it is killed, its record proves it gone
// (errdefs.ErrNotFound). Only for transports whose kernels are Detached; those must be
// Detachable and their Transport a Reattacher.
func testDetachAndReattach(t *testing.T, s *suite) {
	ss, dk := startDetached[transports.Detachable](t, s, "nothing to reattach to", "is not transports.Detachable")
	ss.value(t, "y = 6 * 7")
	id, err := ss.c.Send("import time; time.sleep(1)\nprint('late', y)")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := dk.Detach(); err != nil {
		t.Fatalf("detach: %v", err)
	}
	rec := dk.Record()
	if rec.Transport != ss.tr.Name() || rec.Kernel == "" || rec.Token == "" || rec.RunDir == "" {
		t.Fatalf("record %+v: transport, kernel, token and run directory are required", rec)
	}
	ss2, again := s.reattach(t, ss, rec)
	out := outputUntilDone(t, ss2.c, id, "after the reattach", nil)
	if out != "late 42\n" {
		t.Fatalf("the late cell's output %q after the reattach, want it once", out)
	}
	if got := ss2.value(t, "y + 1"); got != "43" {
		t.Fatalf("the namespace after the reattach: y + 1 = %s, want 43", got)
	}
	stop(t, ss2.k, s.cfg.timeout)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.timeout)
	defer cancel()
	if k3, err := again.Reattach(ctx, dk.Record()); !errdefs.IsNotFound(err) {
		if k3 != nil {
			stop(t, k3, s.cfg.timeout)
		}
		t.Fatalf("reattach to a killed kernel: %v, want errdefs.ErrNotFound", err)
	}
}

// A host call the controller took and never answered before it was replaced (a
// restarted controller reattaching from the record) fails in its cell with code unknown
// at the new controller's attach, and never reaches the new controller: it runs at most
// once. Only for transports whose kernels are Detached.
func testHostCallOfAReplacedController(t *testing.T, s *suite) {
	ss, dk := startDetached[transports.Detachable](t, s, "no controller to replace", "is not transports.Detachable")
	id, err := ss.c.Send("import kennel\ntry:\n    kennel.host_request('echo', n=7)\nexcept kennel.HostError as e:\n    print('code', e.code)")
	if err != nil {
		t.Fatal(err)
	}
	for {
		f, err := ss.c.Next()
		if err != nil {
			t.Fatalf("waiting for the host call: %v", err)
		}
		if f.Event() == "host_request" {
			break
		}
	}
	if err := dk.Detach(); err != nil {
		t.Fatalf("detach: %v", err)
	}
	ss2, _ := s.reattach(t, ss, dk.Record())
	out := outputUntilDone(t, ss2.c, id, "after the new controller's attach", func(f Frame) {
		if f.Event() == "host_request" {
			t.Errorf("the new controller got the request the earlier one took: %s", f.Raw)
		}
	})
	if out != "code unknown\n" {
		t.Fatalf("the cell's output %q, want its host call failed with code unknown", out)
	}
}

// startDetached starts a kernel on a fresh transport of the suite's and checks its hello,
// or skips the test (saying why) when the transport's kernels are not detached. A
// detached kernel must be a K (lacks says how it is not); it is returned as one.
func startDetached[K any](t *testing.T, s *suite, why, lacks string) (*session, K) {
	t.Helper()
	tr := s.newTransport(t)
	if !tr.Capabilities().Detached {
		t.Skip("kernels not detached: " + why)
	}
	ss := s.start(t, tr, s.spec(t))
	k, ok := ss.k.(K)
	if !ok {
		t.Fatalf("a detached kernel (%T) %s", ss.k, lacks)
	}
	return ss, k
}

// reattach reaches the kernel of rec again through a fresh Transport of the suite's (what
// a restarted controller has), as a session whose client goes on after ss's cell ids,
// and checks its hello; the kernel is stopped at cleanup. It returns the session and the
// transport.
func (s *suite) reattach(t *testing.T, ss *session, rec transports.Record) (*session, transports.Reattacher) {
	t.Helper()
	again, ok := s.newTransport(t).(transports.Reattacher)
	if !ok {
		t.Fatalf("transport %q is Detached but not a transports.Reattacher", ss.tr.Name())
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.timeout)
	defer cancel()
	k2, err := again.Reattach(ctx, rec)
	if err != nil {
		t.Fatalf("reattach from %+v: %v", rec, err)
	}
	c2 := NewClient(k2)
	c2.Timeout = s.cfg.timeout
	c2.seq = ss.c.seq // a kernel keeps its newest cells' ids: a new controller's are new
	t.Cleanup(func() {
		stop(t, k2, s.cfg.timeout)
		_ = c2.End(s.cfg.timeout)
	})
	return &session{tr: again.(transports.Transport), k: k2, c: c2, hello: s.checkHello(t, c2)}, again
}

// outputUntilDone reads c's frames until the done of cell id and returns the stream text
// read meanwhile; other frames go to other (when set). what names the wait in a failure.
func outputUntilDone(t *testing.T, c *Client, id, what string, other func(Frame)) string {
	t.Helper()
	out := ""
	for {
		f, err := c.Next()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		switch {
		case f.Event() == "stream":
			out += f.Str("text")
		case f.Event() == "done" && f.ID() == id:
			return out
		case other != nil:
			other(f)
		}
	}
}

func randomValue() string { return fmt.Sprintf("v%016x", rand.Uint64()) }

func testEnv(t *testing.T, s *suite) {
	v := randomValue()
	ss := s.start(t, s.newTransport(t), s.spec(t, "KENNEL_TT_VALUE="+v, "KENNEL_TT_EMPTY="))
	if got := ss.value(t, "import os\nos.environ['KENNEL_TT_VALUE']"); got != "'"+v+"'" {
		t.Errorf("KENNEL_TT_VALUE in the kernel: %s, want '%s'", got, v)
	}
	if got := ss.value(t, "os.environ.get('KENNEL_TT_EMPTY')"); got != "''" {
		t.Errorf("KENNEL_TT_EMPTY in the kernel: %s, want ''", got)
	}
}

func testHostEnv(t *testing.T, s *suite) {
	tr := s.newTransport(t)
	v := randomValue()
	t.Setenv("KENNEL_TT_HOST", v)
	ss := s.start(t, tr, s.spec(t))
	got := ss.value(t, "import os\nstr(os.environ.get('KENNEL_TT_HOST'))")
	if tr.Capabilities().HostEnv {
		if got != "'"+v+"'" {
			t.Errorf("host variable in the kernel: %s, want '%s'", got, v)
		}
	} else if got != "'None'" {
		t.Errorf("host variable leaked into the kernel of a transport without HostEnv: %s", got)
	}
}

func testCwd(t *testing.T, s *suite) {
	tr := s.newTransport(t)
	sp := s.spec(t)
	ss := s.start(t, tr, sp)
	got := ss.value(t, "import os\nos.getcwd()")
	want := sp.Dir
	if tr.Capabilities().SameFS {
		if real, err := filepath.EvalSymlinks(want); err == nil {
			want = real
		}
	}
	if got != strconv.Quote(want) && got != "'"+want+"'" {
		t.Errorf("cwd %s, want %q", got, want)
	}
}

func testStdinEOF(t *testing.T, s *suite) {
	ss := s.start(t, s.newTransport(t), s.spec(t))
	ss.value(t, "1")
	if err := ss.k.Stdin().Close(); err != nil {
		t.Fatal(err)
	}
	exit, err := ss.wait(t)
	if err != nil || exit != (transports.Exit{Code: 0}) {
		t.Fatalf("after stdin EOF: %+v, %v; want a clean exit 0, not killed", exit, err)
	}
	ss.end(t)
}

// startSleepers runs the sleepers cell (Client.Sleepers) and returns the processes,
// the kernel's last (empty without host pids).
func (ss *session) startSleepers(t *testing.T) []proc {
	t.Helper()
	pids, err := ss.c.Sleepers()
	if err != nil {
		t.Fatal(err)
	}
	if !ss.tr.Capabilities().HostPIDs {
		return nil
	}
	var ps []proc
	for _, pid := range pids {
		p, ok := identify(pid)
		if !ok {
			t.Fatalf("sleeper %d is not alive before the kill", pid)
		}
		ps = append(ps, p)
	}
	k, ok := identify(ss.k.Info().PID)
	if !ok {
		t.Fatalf("kernel %d is not alive before the kill", ss.k.Info().PID)
	}
	return append(ps, k)
}

// assertGone fails the test for every process still alive (and kills it).
func assertGone(t *testing.T, ps []proc) {
	t.Helper()
	for _, p := range ps {
		if p.alive() {
			t.Errorf("process %d outlived the kernel", p.pid)
			_ = testproc.Kill(p.pid, syscall.SIGKILL)
		}
	}
}

func testKillLeavesNothing(t *testing.T, s *suite) { killWithSleepers(t, s, "") }

// A cell that holds the kernel's main thread does not hold off Kill: the stages go on
// to signals.
func testKillBusyKernel(t *testing.T, s *suite) { killWithSleepers(t, s, "while True: pass") }

// killWithSleepers starts sleepers in a kernel, sends it busy (a cell left running, or
// ""), kills it and checks that no sleeper is left.
func killWithSleepers(t *testing.T, s *suite, busy string) {
	ss := s.start(t, s.newTransport(t), s.spec(t))
	ps := ss.startSleepers(t)
	if busy != "" {
		if _, err := ss.c.Send(busy); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.timeout)
	defer cancel()
	if err := ss.k.Kill(ctx); err != nil {
		t.Fatalf("kill: %v", err)
	}
	exit, err := ss.wait(t)
	if err != nil || !exit.Killed {
		t.Fatalf("after Kill: %+v, %v; want Killed", exit, err)
	}
	if len(ps) == 0 {
		t.Log("no host pids: the sleepers' end is not checked")
	}
	assertGone(t, ps)
	if busy == "" {
		ss.end(t)
	}
}

func testKillTwice(t *testing.T, s *suite) {
	ss := s.start(t, s.newTransport(t), s.spec(t))
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.timeout)
	defer cancel()
	var wg sync.WaitGroup
	exits := make([]transports.Exit, 4)
	errs := make([]error, 8)
	for i := range 4 {
		wg.Go(func() { errs[i] = ss.k.Kill(ctx) })
		wg.Go(func() { exits[i], errs[4+i] = ss.k.Wait() })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("call %d: %v", i, err)
		}
	}
	for i, e := range exits {
		if e != exits[0] || !e.Killed {
			t.Errorf("Wait %d: %+v, want Killed and the same as %+v", i, e, exits[0])
		}
	}
	if err := ss.k.Kill(ctx); err != nil {
		t.Errorf("Kill after the end: %v", err)
	}
	if e, err := ss.k.Wait(); e != exits[0] || err != nil {
		t.Errorf("Wait after the end: %+v, %v", e, err)
	}
	// Once the end is confirmed, Kill says so even with a context that has ended.
	done, stop := context.WithCancel(context.Background())
	stop()
	if err := ss.k.Kill(done); err != nil {
		t.Errorf("Kill with an ended context after the end: %v", err)
	}
}

func testSignalDeath(t *testing.T, s *suite) {
	tr := s.newTransport(t)
	if !tr.Capabilities().HostPIDs {
		t.Skip("needs host pids: a wrapper may report a signal death as an exit code")
	}
	ss := s.start(t, tr, s.spec(t))
	if _, err := ss.c.Send("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"); err != nil {
		t.Fatal(err)
	}
	exit, err := ss.wait(t)
	want := transports.Exit{Code: -1, Signal: int(syscall.SIGKILL)}
	if err != nil || exit != want {
		t.Fatalf("kernel killed by SIGKILL: %+v, %v; want %+v", exit, err, want)
	}
}

func testStartFailures(t *testing.T, s *suite) {
	tr := s.newTransport(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if k, err := tr.Start(ctx, s.spec(t)); err == nil {
		stop(t, k, s.cfg.timeout)
		t.Errorf("Start with a cancelled context succeeded")
	}
	if tr.Capabilities().SameFS {
		sp := s.spec(t)
		sp.Dir = filepath.Join(sp.Dir, "missing")
		if k, err := tr.Start(context.Background(), sp); err == nil {
			stop(t, k, s.cfg.timeout)
			t.Errorf("Start in a missing directory succeeded")
		}
	}
	// A missing interpreter: Start refuses with ErrUnavailable, or (a transport that
	// cannot look before it starts) the kernel ends by itself without a hello.
	sp := s.spec(t)
	sp.Python = "/nonexistent/python3"
	k, err := tr.Start(context.Background(), sp)
	if err != nil {
		if !errors.Is(err, transports.ErrUnavailable) {
			t.Errorf("Start with a missing interpreter: %v, want transports.ErrUnavailable", err)
		}
		return
	}
	c := NewClient(k)
	c.Timeout = s.cfg.timeout
	exit, err := (&session{tr: tr, k: k, c: c}).wait(t)
	if err == nil && exit.Code == 0 && exit.Signal == 0 {
		t.Errorf("kernel with a missing interpreter: %+v, want a failure", exit)
	}
	select {
	case f, ok := <-c.rd.frames:
		if ok {
			t.Errorf("kernel with a missing interpreter wrote %s", f.Raw)
		}
	case <-time.After(s.cfg.timeout):
		t.Errorf("stdout of a kernel with a missing interpreter did not end")
	}
	// A failed Start leaves nothing: the case's cleanup counts the children.
}

// The one rule of a kernel's environment: Spec.Env wins over what the transport merely
// defaults (PATH, MALLOC_MMAP_THRESHOLD_), and the transport's own entries hold: the
// bundle hash, and the owner, a host pid (the controller's) where the kernel's pids are
// the host's, else stdin alone; none for a detached kernel, which outlives its controller.
func testEnvPrecedence(t *testing.T, s *suite) {
	tr := s.newTransport(t)
	path := "/kennel-tt-" + randomValue() + ":/usr/local/bin:/usr/bin:/bin"
	ss := s.start(t, tr, s.spec(t, "PATH="+path, "MALLOC_MMAP_THRESHOLD_=65536"))
	got := ss.value(t, `import os
[os.environ.get(k) for k in ("PATH", "MALLOC_MMAP_THRESHOLD_", "KENNEL_KERNEL_BUNDLE",
    "KENNEL_KERNEL_OWNER", "KENNEL_KERNEL_OWNER_PID")]`)
	owner := "'stdin', None"
	switch caps := tr.Capabilities(); {
	case caps.Detached:
		owner = "None, None"
	case caps.HostPIDs:
		owner = "None, '" + strconv.Itoa(os.Getpid()) + "'"
	}
	if want := "['" + path + "', '65536', '" + s.bundle + "', " + owner + "]"; got != want {
		t.Errorf("PATH, MALLOC_MMAP_THRESHOLD_, bundle, owner, owner pid in the kernel: %s, want %s", got, want)
	}
}

// A Spec no transport starts from is refused before anything runs, with the one class
// (errdefs.ErrInvalidArgument, a *transports.FieldError naming the field); above all a
// Spec.Env that names an entry the transport sets itself, which could untie the kernel
// from its controller. The case's cleanup checks that nothing was left running.
func testSpecRefused(t *testing.T, s *suite) {
	tr := s.newTransport(t)
	for _, c := range []struct {
		name, field string
		edit        func(sp *transports.Spec)
	}{
		{"no session id", "Spec.SessionID", func(sp *transports.Spec) { sp.SessionID = "" }},
		{"relative dir", "Spec.Dir", func(sp *transports.Spec) { sp.Dir = "relative" }},
		{"NUL in dir", "Spec.Dir", func(sp *transports.Spec) { sp.Dir += "\x00x" }},
		{"env not KEY=VALUE", "Spec.Env[1]", func(sp *transports.Spec) { sp.Env = []string{"A=1", "NOEQUALS"} }},
		{"env NUL", "Spec.Env[0]", func(sp *transports.Spec) { sp.Env = []string{"A=b\x00c"} }},
		{"env owner", "Spec.Env[0]", func(sp *transports.Spec) { sp.Env = []string{"KENNEL_KERNEL_OWNER=pid"} }},
		{"env owner pid", "Spec.Env[0]", func(sp *transports.Spec) { sp.Env = []string{"KENNEL_KERNEL_OWNER_PID=1"} }},
		{"env bundle", "Spec.Env[0]", func(sp *transports.Spec) { sp.Env = []string{"KENNEL_KERNEL_BUNDLE=" + s.bundle} }},
		{"env EOF grace", "Spec.Env[0]", func(sp *transports.Spec) { sp.Env = []string{"KENNEL_KERNEL_EOF_GRACE=86400"} }},
		{"env run marker", "Spec.Env[0]", func(sp *transports.Spec) { sp.Env = []string{"KENNEL_REMOTE_RUN=x"} }},
		{"python an option", "Spec.Python", func(sp *transports.Spec) { sp.Python = "-c" }},
		{"python with a newline", "Spec.Python", func(sp *transports.Spec) { sp.Python = "python3\nx" }},
		{"python an assignment", "Spec.Python", func(sp *transports.Spec) { sp.Python = "A=b" }},
	} {
		sp := s.spec(t)
		c.edit(&sp)
		k, err := tr.Start(context.Background(), sp)
		if err == nil {
			stop(t, k, s.cfg.timeout)
			t.Errorf("%s: Start succeeded", c.name)
			continue
		}
		var fe *transports.FieldError
		if !errdefs.IsInvalidArgument(err) || !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: %v, want an invalid argument naming %s", c.name, err, c.field)
		}
	}
}
