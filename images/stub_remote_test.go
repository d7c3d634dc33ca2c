package images

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// register runs cell id, which registers @remote functions, answering each
// remote.register request ok; it returns the requests' args and the cell's done.
func (k *kernel) register(id, code string) ([]map[string]any, frame) {
	k.t.Helper()
	k.send("execute", id, "code", code)
	var regs []map[string]any
	for {
		f := k.next()
		switch {
		case f.Event == "host_request" && f.str("type") == "remote.register":
			args, _ := f.M["args"].(map[string]any)
			regs = append(regs, args)
			k.send("host_reply", f.ID, "status", "ok", "result", map[string]any{"name": args["name"]})
		case f.Event == "done" && f.ID == id:
			return regs, f
		}
	}
}

// call sends call id and returns its done.
func (k *kernel) call(id, function string, args any) frame {
	k.t.Helper()
	k.send("call", id, "module", "__main__", "function", function, "args", args)
	got := k.until(isDone(id))
	return got[len(got)-1]
}

// callValue decodes an ok call's result, the JSON text of the value.
func callValue(t *testing.T, done frame) any {
	t.Helper()
	if done.str("status") != "ok" {
		t.Fatalf("call %s: %s", done.ID, done)
	}
	var v any
	if err := json.Unmarshal([]byte(done.str("result")), &v); err != nil {
		t.Fatalf("call %s result %q: %v", done.ID, done.str("result"), err)
	}
	return v
}

func callFailed(t *testing.T, done frame, reason, ename string) {
	t.Helper()
	e, _ := done.M["error"].(map[string]any)
	if done.str("status") != "error" || done.str("reason") != reason || e == nil || e["ename"] != ename {
		t.Fatalf("call %s: %s, want an error with reason %s and ename %s", done.ID, done, reason, ename)
	}
}

const remoteCell = `
import asyncio, time
from typing import Optional, Literal

@kennel.remote
def add(a: int, b: int = 1, *, note: Optional[str] = None, tags: list[str] = [], mode: Literal["x", "y"] = "x") -> int:
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
async def later(x: int, **rest) -> dict:
    await asyncio.sleep(0.01)
    return {"x": x, "rest": rest}

@kennel.remote(name="renamed")
def plain(v):
    return [v, v]
`

func TestRemoteFunctionsRegisterWithASchemaFromTheirHints(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	regs, done := k.register("c1", remoteCell)
	if done.str("status") != "ok" {
		t.Fatalf("registering cell: %s", done)
	}
	if len(regs) != 6 {
		t.Fatalf("%d registrations, want 6: %v", len(regs), regs)
	}
	add := regs[0]
	if add["name"] != "add" || add["module"] != "__main__" || add["qualname"] != "add" || add["doc"] != "Add two numbers." || add["async"] != false {
		t.Errorf("add registered as %v", add)
	}
	want := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"a":    map[string]any{"type": "integer"},
			"b":    map[string]any{"type": "integer", "default": json.Number("1")},
			"note": map[string]any{"anyOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "null"}}, "default": nil},
			"tags": map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "default": []any{}},
			"mode": map[string]any{"enum": []any{"x", "y"}, "default": "x"},
		},
		"required":             []any{"a"},
		"additionalProperties": false,
	}
	if !reflect.DeepEqual(add["schema"], want) {
		got, _ := json.Marshal(add["schema"])
		t.Errorf("add's schema = %s", got)
	}
	if later := regs[4]; later["async"] != true || later["schema"].(map[string]any)["additionalProperties"] != true {
		t.Errorf("later registered as %v", later)
	}
	if regs[5]["name"] != "renamed" || regs[5]["qualname"] != "plain" {
		t.Errorf("a renamed function registered as %v", regs[5])
	}
}

func TestARemoteFunctionWithAPositionalOnlyParameterIsRefused(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	for i, code := range []string{
		"@kennel.remote\ndef f(a, /, b):\n    pass",
		"@kennel.remote\ndef g(*args):\n    pass",
	} {
		regs, done := k.register("c"+itoa(i), code)
		e, _ := done.M["error"].(map[string]any)
		if len(regs) != 0 || done.str("status") != "error" || e["ename"] != "TypeError" || !strings.Contains(e["evalue"].(string), "keyword") {
			t.Errorf("%q: registrations %v, done %s", code, regs, done)
		}
	}
}

func TestRemoteCallsAnswerTheirValueOrATypedError(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	if _, done := k.register("c1", remoteCell); done.str("status") != "ok" {
		t.Fatalf("registering cell: %s", done)
	}
	k.send("call", "r1", "module", "__main__", "function", "add", "args", map[string]any{"a": 2, "b": 3})
	got := k.until(isDone("r1"))
	if v := callValue(t, got[len(got)-1]); v != json.Number("5") && v != 5.0 {
		t.Errorf("add(2, 3) = %v", v)
	}
	if out := streamText(got, "r1", "stdout"); out != "adding 2 3\n" {
		t.Errorf("add's output under its call id: %q", out)
	}
	callFailed(t, k.call("r2", "boom", map[string]any{"why": "because"}), "failed", "ValueError")
	callFailed(t, k.call("r3", "missing", map[string]any{}), "unknown", "RemoteUnknown")
	// NaN: the frame stays strict JSON (parseFrame checks it) and the kernel goes on.
	callFailed(t, k.call("r4", "nan", nil), "unencodable", "ValueError")
	// Wrong arguments to a synchronous and to an async function: failed with the
	// TypeError's text.
	done := k.call("r5", "add", map[string]any{"c": 1})
	callFailed(t, done, "failed", "TypeError")
	if e := done.M["error"].(map[string]any); !strings.Contains(e["evalue"].(string), "'c'") {
		t.Errorf("the TypeError's text: %v", e["evalue"])
	}
	callFailed(t, k.call("r6", "later", []any{1}), "failed", "TypeError")
	callFailed(t, k.call("r7", "later", map[string]any{}), "failed", "TypeError")
	v := callValue(t, k.call("r8", "later", map[string]any{"x": 1, "y": "z"}))
	if m, _ := v.(map[string]any); m["rest"].(map[string]any)["y"] != "z" {
		t.Errorf("later(x=1, y='z') = %v", v)
	}
	if v := callValue(t, k.call("r9", "renamed", map[string]any{"v": "a"})); !reflect.DeepEqual(v, []any{"a", "a"}) {
		t.Errorf("renamed(v='a') = %v", v)
	}
	// A hanging function costs its thread only: cells and calls go on.
	k.send("call", "r10", "module", "__main__", "function", "hang", "args", map[string]any{})
	if got := k.result("c2", "add(a=40, b=2)"); got != "42" {
		t.Errorf("a cell while a call hangs: %s", got)
	}
	callValue(t, k.call("r11", "add", map[string]any{"a": 1}))
}

func TestARemoteCallDoesNotWaitForTheRunningCell(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	if _, done := k.register("c1", remoteCell); done.str("status") != "ok" {
		t.Fatalf("registering cell: %s", done)
	}
	k.startCell("c2", "print('go', flush=True)\nimport time\ntime.sleep(3600)")
	k.send("call", "r1", "module", "__main__", "function", "add", "args", map[string]any{"a": 1})
	got := k.until(func(f frame) bool { return f.Event == "done" })
	if last := got[len(got)-1]; last.ID != "r1" {
		t.Fatalf("first done is %s, want the call's", last)
	}
	// An async function runs on the kernel's loop: while a synchronous cell holds the
	// main thread it waits, and it answers once the cell ends.
	k.send("call", "r2", "module", "__main__", "function", "later", "args", map[string]any{"x": 2})
	k.send("interrupt", "c2")
	if order, _ := k.doneOrder("c2", "r2"); order[0] != "c2" {
		t.Fatalf("dones in order %v: the async call ran while a synchronous cell held the kernel", order)
	}
	// While a cell awaits, an async call runs beside it.
	k.startCell("c3", "import asyncio\nprint('go', flush=True)\nawait asyncio.sleep(3600)")
	k.send("call", "r3", "module", "__main__", "function", "later", "args", map[string]any{"x": 3})
	got = k.until(func(f frame) bool { return f.Event == "done" })
	if last := got[len(got)-1]; last.ID != "r3" {
		t.Fatalf("first done is %s, want the async call's", last)
	}
	k.send("interrupt", "c3")
	k.until(isDone("c3"))
}
