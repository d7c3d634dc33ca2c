package images

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// runUntilStream starts a cell and waits for its first stream frame (it has begun).
func (k *kernel) startCell(id, code string) []frame {
	k.t.Helper()
	k.send("execute", id, "code", code)
	return k.until(func(f frame) bool { return f.Event == "stream" && f.ID == id })
}

func TestInterruptBusyLoopKeepsNamespace(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	k.result("c0", "y = 5")
	k.startCell("c1", "print('go', flush=True)\nwhile True:\n    pass")
	k.send("interrupt", "c1")
	got := k.until(isDone("c1"))
	if done := got[len(got)-1]; done.str("status") != "interrupted" || done.M["error"] != nil {
		t.Errorf("done = %s", done)
	}
	if got := k.result("c2", "y"); got != "5" {
		t.Errorf("y after interrupt = %s", got)
	}
}

func TestInterruptBlockingCalls(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"sleep":      "import time\nprint('go')\ntime.sleep(100)",
		"lock":       "import threading\nl = threading.Lock(); l.acquire()\nprint('go')\nl.acquire()",
		"read pipe":  "import os\nr, w = os.pipe()\nprint('go')\nos.read(r, 1)",
		"subprocess": "import subprocess\nprint('go')\nsubprocess.run(['sleep', '100'])",
	}
	for name, code := range cases {
		t.Run(name, func(t *testing.T) {
			k := startKernel(t, kernelOpts{})
			k.startCell("c1", code)
			k.send("interrupt", "c1")
			got := k.until(isDone("c1"))
			if done := got[len(got)-1]; done.str("status") != "interrupted" {
				t.Errorf("done = %s", done)
			}
			if got := k.result("c2", "'alive'"); got != "'alive'" {
				t.Errorf("after = %s", got)
			}
		})
	}
}

func TestInterruptOfACellNotRunningDoesNothing(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	k.send("interrupt", "c0") // nothing runs
	k.startCell("c1", "import time\nprint('go')\ntime.sleep(0.3)\n'finished'")
	k.send("interrupt", "other")
	k.send("interrupt", "c0")
	got := k.until(isDone("c1"))
	if done := got[len(got)-1]; done.str("status") != "ok" || done.str("result") != "'finished'" {
		t.Errorf("done = %s", done)
	}
	// The cell catches its own KeyboardInterrupt; the kernel goes on.
	k.startCell("c2", "import time\ntry:\n    print('go')\n    time.sleep(100)\nexcept KeyboardInterrupt:\n    r = 'caught'\nr")
	k.send("interrupt", "c2")
	got = k.until(isDone("c2"))
	if done := got[len(got)-1]; done.str("status") != "ok" || done.str("result") != "'caught'" {
		t.Errorf("done = %s", done)
	}
}

func TestInterruptWhilePrinting(t *testing.T) {
	t.Parallel()
	// Interrupts arriving while the cell writes frames never cut a frame: the harness
	// checks every line.
	k := startKernel(t, kernelOpts{})
	for _, id := range []string{"p1", "p2", "p3"} {
		k.startCell(id, "while True:\n    print('x' * 1000)")
		k.send("interrupt", id)
		got := k.until(isDone(id))
		if done := got[len(got)-1]; done.str("status") != "interrupted" {
			t.Errorf("done = %s", done)
		}
	}
	if got := k.result("c", "1"); got != "1" {
		t.Errorf("after = %s", got)
	}
}

// hostRequest waits for the next host_request frame and checks its head.
func (k *kernel) hostRequest() frame {
	k.t.Helper()
	got := k.until(func(f frame) bool { return f.Event == "host_request" })
	f := got[len(got)-1]
	if !strings.HasPrefix(string(f.Raw), `{"event":"host_request","id":"`+f.ID+`","type":`) {
		k.t.Errorf("host_request head: %s", f)
	}
	return f
}

func TestHostRequestRoundTrip(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	k.send("execute", "c1", "code", "r = kennel.host_request('echo', a=1, b=[1, 'x'], type='t')\nr")
	req := k.hostRequest()
	if req.str("type") != "echo" || req.str("cell") != "c1" {
		t.Errorf("request = %s", req)
	}
	args, _ := req.M["args"].(map[string]any)
	want := map[string]any{"a": json.Number("1"), "b": []any{json.Number("1"), "x"}, "type": "t"}
	if !reflect.DeepEqual(args, want) {
		t.Errorf("args = %v, want %v", args, want)
	}
	k.send("host_reply", req.ID, "status", "ok", "result", map[string]any{"v": 2})
	got := k.until(isDone("c1"))
	if done := got[len(got)-1]; done.str("result") != "{'v': 2}" {
		t.Errorf("done = %s", done)
	}
}

func TestHostRequestErrorRaisesHostError(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	k.send("execute", "c1", "code", "try:\n    kennel.fs.read('/etc/passwd')\nexcept kennel.HostError as e:\n    r = (e.code, e.message, e.reason, e.version)\nr")
	req := k.hostRequest()
	k.send("host_reply", req.ID, "status", "error", "error", map[string]any{"code": "outside", "message": "not in a mount", "reason": "outside", "version": "transport@1"})
	got := k.until(isDone("c1"))
	if done := got[len(got)-1]; done.str("result") != "('outside', 'not in a mount', 'outside', 'transport@1')" {
		t.Errorf("done = %s", done)
	}
	// Uncaught, it fails the cell with its name.
	k.send("execute", "c2", "code", "kennel.host_request('x')")
	req = k.hostRequest()
	k.send("host_reply", req.ID, "status", "error", "error", map[string]any{"code": "unserved", "message": "no"})
	got = k.until(isDone("c2"))
	done := got[len(got)-1]
	if e, _ := done.M["error"].(map[string]any); e["ename"] != "HostError" || e["evalue"] != "unserved: no" {
		t.Errorf("done = %s", done)
	}
}

func TestDuplicateReplyDoesNotSettleTheRequest(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	k.send("execute", "c1", "code", "kennel.host_request('slow')")
	req := k.hostRequest()
	// The gate's refusal of a reused id comes under the id of the request in flight.
	k.send("host_reply", req.ID, "status", "duplicate", "error", map[string]any{"code": "duplicate", "message": "id used"})
	got := k.until(func(f frame) bool { return f.Event == "log" || f.Event == "done" })
	if f := got[len(got)-1]; f.Event != "log" || !strings.Contains(f.str("message"), "duplicate") {
		t.Fatalf("after a duplicate reply: %s", f)
	}
	// The request is still in flight: the real reply settles it.
	k.send("host_reply", req.ID, "status", "ok", "result", "real")
	got = k.until(isDone("c1"))
	if done := got[len(got)-1]; done.str("status") != "ok" || done.str("result") != "'real'" {
		t.Errorf("done = %s", done)
	}
	// A reply for no pending request is dropped with a log.
	k.send("host_reply", req.ID, "status", "ok", "result", "late")
	got = k.until(func(f frame) bool { return f.Event == "log" })
	if !strings.Contains(got[len(got)-1].str("message"), "no request") {
		t.Errorf("late reply: %s", got[len(got)-1])
	}
}

func TestInterruptEndsAHostRequestWait(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	k.send("execute", "c1", "code", "kennel.host_request('never')")
	req := k.hostRequest()
	k.send("interrupt", "c1")
	got := k.until(isDone("c1"))
	if done := got[len(got)-1]; done.str("status") != "interrupted" {
		t.Errorf("done = %s", done)
	}
	k.send("host_reply", req.ID, "status", "ok", "result", 1) // too late: dropped
	if got := k.result("c2", "kennel._rt.host.waiting()"); got != "0" {
		t.Errorf("waiting = %s", got)
	}
}

func TestConcurrentHostRequestsMatchByID(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	code := `import threading
out = {}
def call(n):
    out[n] = kennel.host_request('n', n=n)
ts = [threading.Thread(target=call, args=(n,)) for n in range(3)]
[t.start() for t in ts]
[t.join() for t in ts]
sorted(out.items())`
	k.send("execute", "c1", "code", code)
	var reqs []frame
	for len(reqs) < 3 {
		reqs = append(reqs, k.hostRequest())
	}
	for i := len(reqs) - 1; i >= 0; i-- { // answer in reverse order
		args := reqs[i].M["args"].(map[string]any)
		k.send("host_reply", reqs[i].ID, "status", "ok", "result", "r"+string(args["n"].(json.Number)))
	}
	got := k.until(isDone("c1"))
	if done := got[len(got)-1]; done.str("result") != "[(0, 'r0'), (1, 'r1'), (2, 'r2')]" {
		t.Errorf("done = %s", done)
	}
}

func TestFsWrappersSendTheirArgs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := startKernel(t, kernelOpts{dir: dir})
	cases := []struct {
		code, typ string
		args      map[string]any
	}{
		{"kennel.fs.read('a.txt')", "fs.read", map[string]any{"path": "a.txt", "offset": json.Number("0")}},
		{"kennel.fs.read('a.txt', offset=3, limit=9)", "fs.read", map[string]any{"path": "a.txt", "offset": json.Number("3"), "limit": json.Number("9")}},
		{"kennel.fs.write('b', 'text')", "fs.write", map[string]any{"path": "b", "content": "text"}},
		{"kennel.fs.edit('c', edits=[('x', 'y')], moves=[('c', 'd')])", "fs.edit", map[string]any{"path": "c", "edits": []any{map[string]any{"old": "x", "new": "y"}}, "moves": []any{map[string]any{"from": "c", "to": "d"}}}},
		{"kennel.fs.edit(moves=[{'from': 'a', 'to': 'b'}])", "fs.edit", map[string]any{"moves": []any{map[string]any{"from": "a", "to": "b"}}}},
		{"kennel.fs.grep('TODO', glob='*.py', limit=5)", "fs.grep", map[string]any{"pattern": "TODO", "path": ".", "glob": "*.py", "limit": json.Number("5")}},
		{"kennel.fs.glob('**/*.go', path='src')", "fs.glob", map[string]any{"pattern": "**/*.go", "path": "src"}},
	}
	for i, c := range cases {
		id := "c" + string(rune('a'+i))
		k.send("execute", id, "code", c.code)
		req := k.hostRequest()
		c.args["cwd"] = dir
		if req.str("type") != c.typ || !reflect.DeepEqual(req.M["args"], c.args) {
			t.Errorf("%s: request %s, want type %s args %v", c.code, req, c.typ, c.args)
		}
		k.send("host_reply", req.ID, "status", "ok", "result", "r")
		got := k.until(isDone(id))
		if done := got[len(got)-1]; done.str("result") != "'r'" {
			t.Errorf("%s: done %s", c.code, done)
		}
	}
	// A bad edits argument fails in the cell; nothing is sent.
	_, done := k.execute("bad", "kennel.fs.edit('c', edits=['xyz'])")
	if e, _ := done.M["error"].(map[string]any); e["ename"] != "TypeError" {
		t.Errorf("bad edit: %s", done)
	}
}

func TestDisplayFrame(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	before, done := k.execute("c1", "kennel.display({'text/plain': 'hi', 'application/json': {'a': [1]}})")
	if done.str("status") != "ok" {
		t.Fatalf("done = %s", done)
	}
	var d frame
	for _, f := range before {
		if f.Event == "display" {
			d = f
		}
	}
	want := `{"event":"display","id":"c1","data":{"text/plain":"hi","application/json":{"a":[1]}}}` + "\n"
	if string(d.Raw) != want {
		t.Errorf("display = %s, want %s", d.Raw, want)
	}
	for code, ename := range map[string]string{
		"kennel.display('text')":                   "TypeError",
		"kennel.display({'x': float('nan')})":      "ValueError",
		"kennel.host_request('t', v=float('inf'))": "ValueError",
		"kennel.host_request('t', v=object())":     "TypeError",
	} {
		_, done := k.execute("bad", code)
		if e, _ := done.M["error"].(map[string]any); e["ename"] != ename {
			t.Errorf("%s: %s, want %s", code, done, ename)
		}
	}
}

func TestPayloadTooLargeFailsTheCellOnly(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	cases := map[string]string{
		"display 17 MiB": "kennel.display({'text/plain': 'x' * (17 << 20)})",
		"request 17 MiB": "kennel.fs.write('f', 'x' * (17 << 20))",
	}
	for name, code := range cases {
		before, done := k.execute("big", code)
		if e, _ := done.M["error"].(map[string]any); done.str("status") != "error" || e["ename"] != "PayloadTooLarge" {
			t.Errorf("%s: done = %s", name, done)
		}
		for _, f := range before {
			if f.Event == "display" || f.Event == "host_request" {
				t.Errorf("%s: a %s frame was written", name, f.Event)
			}
		}
		if got := k.result("next", "1+1"); got != "2" {
			t.Errorf("%s: next cell = %s", name, got)
		}
	}
}

func TestPayloadLimitBoundary(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	// The frame {"event":"display","id":"c1","data":{"t":"xxx..."}}\n is exactly the
	// limit: written. One byte more: refused.
	overhead := len(`{"event":"display","id":"at","data":{"t":""}}` + "\n")
	limit := 16 << 20
	code := func(n int) string {
		return "kennel.display({'t': 'x' * " + itoa(n) + "})"
	}
	before, done := k.execute("at", code(limit-overhead))
	if done.str("status") != "ok" {
		t.Fatalf("frame of exactly the limit: %s", done)
	}
	found := false
	for _, f := range before {
		if f.Event == "display" {
			found = true
			if len(f.Raw) != limit {
				t.Errorf("display frame is %d bytes, want %d", len(f.Raw), limit)
			}
		}
	}
	if !found {
		t.Error("no display frame at the limit")
	}
	_, done = k.execute("at", code(limit-overhead+1))
	if e, _ := done.M["error"].(map[string]any); e["ename"] != "PayloadTooLarge" {
		t.Errorf("one byte over: %s", done)
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestMalformedHostFramesAreLoggedAndSkipped(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	lines := []string{
		"not json",
		"[1,2]",
		`{"type":"nope","id":"x"}`,
		`{"id":"x"}`,
		`{"type":"execute","id":7,"code":"1"}`,
		"\xff\xfe{}",
		`{"type":"job_kill","id":"none"}`,
		`{"type":"job_kill","id":"none","signal":"KILL"}`,
		`{"type":"host_reply","id":"h999","status":"ok"}`,
	}
	for _, l := range lines {
		if _, err := k.stdin.Write([]byte(l + "\n")); err != nil {
			t.Fatal(err)
		}
		got := k.until(func(f frame) bool { return f.Event == "log" })
		if lv := got[len(got)-1].str("level"); lv == "" {
			t.Errorf("%q: log without level", l)
		}
	}
	k.send("call", "rc1", "module", "m", "function", "f", "args", map[string]any{})
	got := k.until(isDone("rc1"))
	if e, _ := got[len(got)-1].M["error"].(map[string]any); e["ename"] != "RemoteUnknown" || got[len(got)-1].str("reason") != "unknown" {
		t.Errorf("call: %s", got[len(got)-1])
	}
	if got := k.result("c", "'ok'"); got != "'ok'" {
		t.Errorf("after bad frames: %s", got)
	}
}

func TestHostFramesSplitBatchedAndOversized(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	write := func(s string) {
		t.Helper()
		if _, err := k.stdin.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	// Two frames in one write, one frame cut across writes, CRLF and spaces around.
	write(`{"type":"execute","id":"a","code":"1"}` + "\n" + `{"type":"execute","id":"b","code":"2"}` + "\n" + `{"type":"exec`)
	got := k.until(isDone("b"))
	write(`ute","id":"c","code":"3"}` + "\r\n" + `  {"type":"execute","id":"d","code":"4"}  ` + "\n")
	got = append(got, k.until(isDone("d"))...)
	var results []string
	for _, f := range got {
		if f.Event == "done" {
			results = append(results, f.ID+"="+f.str("result"))
		}
	}
	if strings.Join(results, " ") != "a=1 b=2 c=3 d=4" {
		t.Errorf("results = %v", results)
	}
	// Extra data after the object: not a frame.
	write(`{"type":"execute","id":"x","code":"1"} {}` + "\n")
	got = k.until(func(f frame) bool { return f.Event == "log" || f.Event == "done" })
	if f := got[len(got)-1]; f.Event != "log" {
		t.Errorf("frame with extra data ran: %s", f)
	}
	// A line over 32 MiB is dropped whole, with one log; the next frame works.
	big := `{"type":"execute","id":"big","code":"'` + strings.Repeat("x", 33<<20) + `'"}` + "\n"
	go k.stdin.Write([]byte(big + `{"type":"execute","id":"after","code":"'ok'"}` + "\n"))
	got = k.until(isDone("after"))
	logs := 0
	for _, f := range got {
		switch {
		case f.Event == "log" && strings.Contains(f.str("message"), "over"):
			logs++
		case f.Event == "done" && f.ID == "big":
			t.Error("the oversized frame ran")
		}
	}
	if logs != 1 || got[len(got)-1].str("result") != "'ok'" {
		t.Errorf("%d logs; after = %s", logs, got[len(got)-1])
	}
}
