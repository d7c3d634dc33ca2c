package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/daemon"
)

const remoteCell = `
import time

@kennel.remote
def add(a: int, b: int = 1) -> int:
    "Add two numbers."
    print("adding")
    return a + b

@kennel.remote
async def nan():
    return float("nan")

@kennel.remote
def hang():
    time.sleep(3600)
`

func TestRemoteFunctionsAreListedAndCalledThroughTheAPI(t *testing.T) {
	r := serve(t, daemon.Options{})
	ctx := context.Background()
	s := r.newSession(t)
	if fs, err := r.c.Functions(ctx, s.ID); err != nil || len(fs) != 0 {
		t.Fatalf("functions before any registration: %v %v", fs, err)
	}
	if rep, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: remoteCell}); err != nil || rep.Cell == nil || rep.Cell.Status != "ok" {
		t.Fatalf("registering cell: %+v %v", rep, err)
	}
	fs, err := r.c.Functions(ctx, s.ID)
	if err != nil || len(fs) != 3 || fs[0].Name != "add" || fs[0].Doc != "Add two numbers." || !fs[2].Async {
		t.Fatalf("functions: %+v %v", fs, err)
	}
	rep, err := r.c.Call(ctx, s.ID, "add", api.CallFunction{Args: json.RawMessage(`{"a": 2}`)})
	if err != nil || rep.Status != "ok" || string(rep.Value) != "3" || rep.Output == nil || rep.Output.Text != "adding\n" {
		t.Fatalf("add(a=2): %+v %v", rep, err)
	}
	for _, c := range []struct {
		name, args   string
		budget       int64
		code, reason string
	}{
		{"missing", `{}`, 0, "unknown", ""},
		{"nan", ``, 0, "failed", "unencodable"},
		{"add", `{"c": 1}`, 0, "failed", "failed"},
		{"hang", `{}`, 300, "timeout", ""},
	} {
		req := api.CallFunction{Args: json.RawMessage(c.args)}
		if c.budget > 0 {
			req.BudgetMS = &c.budget
		}
		rep, err := r.c.Call(ctx, s.ID, c.name, req)
		if err != nil || rep.Status != "error" || rep.Error == nil || rep.Error.Code != c.code || rep.Error.Reason != c.reason {
			t.Errorf("%s(%s): %+v %v", c.name, c.args, rep, err)
		}
	}
	if _, err := r.c.Call(ctx, "nosuch", "add", api.CallFunction{}); apiCode(t, err) != api.CodeNotFound {
		t.Errorf("a call in no session: %v", err)
	}
}

func TestTheFunctionRoutesAreInTheOpenAPIDocument(t *testing.T) {
	r := serve(t, daemon.Options{})
	v := newValidator(t, r.socket)
	s := r.newSession(t)
	sid := "/sessions/" + s.ID
	js := func(format string, a ...any) []byte { return fmt.Appendf(nil, format, a...) }
	code, _ := json.Marshal(remoteCell)
	v.do(t, exchange{method: "GET", target: sid + "/functions", valid: true, status: 200})
	v.do(t, exchange{method: "POST", target: sid + "/cells", body: js(`{"code":%s}`, code), valid: true, status: 200})
	v.do(t, exchange{method: "GET", target: sid + "/functions", valid: true, status: 200})
	v.do(t, exchange{method: "GET", target: "/sessions/nosuch/functions", valid: true, status: 404})
	for _, ex := range []exchange{
		{target: sid + "/functions/add", body: js(`{"args":{"a":1}}`), valid: true, status: 200},
		{target: sid + "/functions/add", body: js(`{}`), valid: true, status: 200},
		{target: sid + "/functions/nan", body: js(`{"args":null}`), valid: true, status: 200},
		{target: sid + "/functions/missing", body: js(`{"args":{}}`), valid: true, status: 200},
		{target: sid + "/functions/hang", body: js(`{"budget_ms":100}`), valid: true, status: 200},
		{target: sid + "/functions/add", body: js(`{"args":[1]}`), valid: false, status: 400},
		{target: sid + "/functions/add", body: js(`{"args":{},"x":1}`), valid: false, status: 400},
		{target: "/sessions/nosuch/functions/add", body: js(`{}`), valid: true, status: 404},
	} {
		ex.method = "POST"
		v.do(t, ex)
	}
	v.do(t, exchange{method: "DELETE", target: sid + "/functions", status: 405})

	// Cells read by id: running, settled, unknown; a cell's own timeout.
	det := decode[api.CellReply](t, v.do(t, exchange{method: "POST", target: sid + "/cells", body: js(`{"code":"import asyncio\nawait asyncio.sleep(0.3)\n1","budget_ms":0,"timeout_ms":60000}`), valid: true, status: 200}))
	v.do(t, exchange{method: "GET", target: sid + "/cells/" + det.CellID, valid: true, status: 200})
	v.do(t, exchange{method: "POST", target: sid + "/cells", body: js(`{"code":"import time\ntime.sleep(60)","timeout_ms":100}`), valid: true, status: 200})
	v.do(t, exchange{method: "GET", target: sid + "/cells/" + det.Job, valid: true, status: 200})
	v.do(t, exchange{method: "GET", target: sid + "/cells/c999", valid: true, status: 404})
	v.do(t, exchange{method: "GET", target: "/sessions/nosuch/cells/c1", valid: true, status: 404})
	v.do(t, exchange{method: "GET", target: "/sessions/nosuch/events", valid: true, status: 404})
}

func TestARestartedDaemonKnowsTheResumedKernelsFunctions(t *testing.T) {
	state := filepath.Join(shortDir(t), "state")
	ctx := context.Background()
	r := serveDetaching(t, daemon.Options{StateDir: state})
	s := r.newSession(t)
	if rep, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: remoteCell}); err != nil || rep.Cell == nil || rep.Cell.Status != "ok" {
		t.Fatalf("registering cell: %+v %v", rep, err)
	}
	r.stop()
	r = serveDetaching(t, daemon.Options{StateDir: state, StopKernels: true})
	// The resumed kernel is reattached in the background, then asked for its functions.
	if _, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "1"}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		fs, err := r.c.Functions(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(fs) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the resumed kernel's functions: %+v", fs)
		}
	}
	rep, err := r.c.Call(ctx, s.ID, "add", api.CallFunction{Args: json.RawMessage(`{"a": 5}`)})
	if err != nil || rep.Status != "ok" || string(rep.Value) != "6" {
		t.Fatalf("a call after the restart: %+v %v", rep, err)
	}
}
