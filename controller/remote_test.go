package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/kennel-dev/kennel/controller"
)

const remoteFunctions = `
import asyncio, os, time
from typing import Optional

@kennel.remote
def add(a: int, b: int = 1, *, note: Optional[str] = None) -> int:
    "Add two numbers."
    print("adding", a, b)
    return a + b

@kennel.remote
def boom(why: str):
    raise ValueError(why)

@kennel.remote
def nan() -> float:
    return float("nan")

@kennel.remote
def hang():
    time.sleep(3600)

@kennel.remote
async def later(x: int) -> dict:
    await asyncio.sleep(0.01)
    return {"x": x}

@kennel.remote
def big(n: int) -> str:
    return "y" * n

@kennel.remote
def die():
    time.sleep(0.2)
    os._exit(3)
`

// register runs the cell that registers remoteFunctions.
func register(t *testing.T, s *controller.Session) {
	t.Helper()
	res, _ := execute(t, s, remoteFunctions)
	if res.Status != "ok" {
		t.Fatalf("registering cell: %+v %+v", res, res.Error)
	}
}

func call(t *testing.T, s *controller.Session, name, args string, opts controller.CallOptions) (*controller.CallResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var raw json.RawMessage
	if args != "" {
		raw = json.RawMessage(args)
	}
	return s.Call(ctx, name, raw, opts)
}

func wantCallError(t *testing.T, err error, code controller.RemoteCallCode) *controller.RemoteCallError {
	t.Helper()
	var rce *controller.RemoteCallError
	if !errors.As(err, &rce) || rce.Code != code {
		t.Fatalf("call error %v, want a RemoteCallError %s", err, code)
	}
	return rce
}

func TestRemoteFunctionsAreListedWithTheirSchema(t *testing.T) {
	s := startSession(t, controller.Options{})
	if fs := s.Functions(); len(fs) != 0 {
		t.Fatalf("functions before any registration: %v", fs)
	}
	register(t, s)
	fs := s.Functions()
	var names []string
	for _, f := range fs {
		names = append(names, f.Name)
	}
	if strings.Join(names, " ") != "add big boom die hang later nan" {
		t.Fatalf("functions: %v", names)
	}
	add := fs[0]
	want := `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer","default":1},"note":{"anyOf":[{"type":"string"},{"type":"null"}],"default":null}},"required":["a"],"additionalProperties":false}`
	if add.Module != "__main__" || add.Doc != "Add two numbers." || add.Async || string(add.Schema) != want {
		t.Errorf("add: %+v schema %s", add, add.Schema)
	}
	if !fs[5].Async {
		t.Errorf("later is not async: %+v", fs[5])
	}
	// A parameter that cannot be given by keyword is refused at registration.
	res, _ := execute(t, s, "@kennel.remote\ndef f(a, /):\n    pass")
	if res.Status != "error" || res.Error.EName != "TypeError" {
		t.Fatalf("a positional-only parameter: %+v", res)
	}
	if len(s.Functions()) != len(fs) {
		t.Errorf("the refused function was listed")
	}
}

func TestRemoteCallsAnswerValuesAndTypedErrors(t *testing.T) {
	s := startSession(t, controller.Options{})
	// The kernel runs and registered nothing yet: the function is unknown to it.
	_, err := call(t, s, "add", `{"a":1}`, controller.CallOptions{})
	wantCallError(t, err, controller.CallUnknown)
	register(t, s)
	res, err := call(t, s, "add", `{"a": 2, "b": 3}`, controller.CallOptions{})
	if err != nil || string(res.Value) != "5" || string(res.Output.Kept) != "adding 2 3\n" {
		t.Fatalf("add(a=2, b=3): %+v %v", res, err)
	}
	_, err = call(t, s, "boom", `{"why":"because"}`, controller.CallOptions{})
	if rce := wantCallError(t, err, controller.CallFailed); rce.Exception == nil || rce.Exception.EName != "ValueError" || rce.Exception.EValue != "because" {
		t.Errorf("boom: %v", err)
	}
	_, err = call(t, s, "missing", `{}`, controller.CallOptions{})
	if wantCallError(t, err, controller.CallUnknown); !errdefs.IsNotFound(err) {
		t.Errorf("unknown is not ErrNotFound: %v", err)
	}
	_, err = call(t, s, "nan", "", controller.CallOptions{})
	if rce := wantCallError(t, err, controller.CallFailed); rce.Reason != "unencodable" {
		t.Errorf("nan: %v", err)
	}
	_, err = call(t, s, "later", `{"y": 1}`, controller.CallOptions{})
	if rce := wantCallError(t, err, controller.CallFailed); rce.Exception == nil || rce.Exception.EName != "TypeError" || !strings.Contains(rce.Exception.EValue, "'y'") {
		t.Errorf("later(y=1): %v", err)
	}
	if res, err := call(t, s, "later", `{"x": 4}`, controller.CallOptions{}); err != nil || string(res.Value) != `{"x":4}` {
		t.Errorf("later(x=4): %+v %v", res, err)
	}
	// A hanging function answers timeout at the budget; the kernel serves on.
	_, err = call(t, s, "hang", `{}`, controller.CallOptions{Budget: 300 * time.Millisecond})
	if wantCallError(t, err, controller.CallTimeout); !errdefs.IsDeadlineExceeded(err) {
		t.Errorf("timeout is not a deadline: %v", err)
	}
	if r, _ := execute(t, s, "add(a=40, b=2)"); r.Result == nil || *r.Result != "42" {
		t.Errorf("a cell after the timeout: %+v", r)
	}
	if res, err := call(t, s, "add", `{"a": 1}`, controller.CallOptions{}); err != nil || string(res.Value) != "2" {
		t.Errorf("a call after the timeout: %+v %v", res, err)
	}
	// A value over the output limits keeps them: its window, not the whole value.
	res, err = call(t, s, "big", `{"n": 100000}`, controller.CallOptions{})
	if err != nil || res.Value != nil || res.Truncated == nil || res.Truncated.DroppedBytes == 0 || int64(len(res.Truncated.Kept)) > 50<<10 {
		t.Errorf("a value over the limits: %v %v", res, err)
	}
}

func TestARemoteCallRunsWhileACellRuns(t *testing.T) {
	s := startSession(t, controller.Options{})
	register(t, s)
	ctx := context.Background()
	jw, err := s.ExecuteWait(ctx, "import time\ntime.sleep(3600)", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := call(t, s, "add", `{"a": 1}`, controller.CallOptions{}); err != nil || string(res.Value) != "2" {
		t.Fatalf("a call while a cell runs: %+v %v", res, err)
	}
	if err := s.KillJob(ctx, jw.Outcome.Job()); err != nil {
		t.Fatal(err)
	}
	// An async function runs on the kernel's loop, beside a cell that awaits.
	jw, err = s.ExecuteWait(ctx, "import asyncio\nawait asyncio.sleep(3600)", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := call(t, s, "later", `{"x": 1}`, controller.CallOptions{}); err != nil || string(res.Value) != `{"x":1}` {
		t.Fatalf("an async call while a cell awaits: %+v %v", res, err)
	}
	if err := s.KillJob(ctx, jw.Outcome.Job()); err != nil {
		t.Fatal(err)
	}
}

func TestAKernelThatExitsMidCallAnswersUnreachableAtOnce(t *testing.T) {
	s := startSession(t, controller.Options{})
	register(t, s)
	type answer struct {
		err error
		at  time.Time
	}
	hung := make(chan answer, 1)
	go func() {
		_, err := call(t, s, "hang", `{}`, controller.CallOptions{})
		hung <- answer{err, time.Now()}
	}()
	// die exits the kernel 200 ms into its call; both calls in flight answer unreachable.
	start := time.Now()
	_, err := call(t, s, "die", `{}`, controller.CallOptions{})
	dieAt := time.Now()
	wantCallError(t, err, controller.CallUnreachable)
	a := <-hung
	wantCallError(t, a.err, controller.CallUnreachable)
	// Measured, not asserted (no timing assertions): the kernel's exit to the answer.
	t.Logf("die answered unreachable %v after the kernel's exit; the hanging call %v after that",
		dieAt.Sub(start)-200*time.Millisecond, a.at.Sub(dieAt))
	// No kernel runs now: a call is not_running (and a cell starts a fresh kernel).
	_, err = call(t, s, "add", `{"a": 1}`, controller.CallOptions{})
	wantCallError(t, err, controller.CallNotRunning)
}
