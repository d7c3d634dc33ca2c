package images

import (
	"fmt"
	"strings"
	"testing"
)

// doneOrder reads frames until every id in ids has its done and returns the ids in the
// order their dones came, and every frame read.
func (k *kernel) doneOrder(ids ...string) ([]string, []frame) {
	k.t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var order []string
	var all []frame
	for len(want) > 0 {
		f := k.next()
		all = append(all, f)
		if f.Event == "done" && want[f.ID] {
			order = append(order, f.ID)
			delete(want, f.ID)
		}
	}
	return order, all
}

func doneOf(frames []frame, id string) frame {
	for _, f := range frames {
		if f.Event == "done" && f.ID == id {
			return f
		}
	}
	return frame{}
}

func TestACellThatAwaitsLetsTheNextRunAndEndsWithItsOwnResult(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	k.send("execute", "a", "code", "import asyncio\nprint('a starts')\nawait asyncio.sleep(0.5)\nprint('a ends')\n'a done'")
	k.send("execute", "b", "code", "print('b runs')\n6 * 7")
	order, frames := k.doneOrder("a", "b")
	if strings.Join(order, " ") != "b a" {
		t.Fatalf("dones in order %v, want b before a", order)
	}
	if d := doneOf(frames, "a"); d.str("status") != "ok" || d.str("result") != "'a done'" {
		t.Errorf("a: %s", d)
	}
	if d := doneOf(frames, "b"); d.str("result") != "42" {
		t.Errorf("b: %s", d)
	}
	if out := streamText(frames, "a", "stdout"); out != "a starts\na ends\n" {
		t.Errorf("a's output: %q", out)
	}
	if out := streamText(frames, "b", "stdout"); out != "b runs\n" {
		t.Errorf("b's output: %q", out)
	}
	// The namespace is one: an awaited value is there for the next cell.
	if got := k.result("c", "x = await asyncio.sleep(0, result=5)\nx + 1"); got != "6" {
		t.Errorf("an awaited value: %s", got)
	}
}

func TestASynchronousCellHoldsTheCellsThatAwait(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	k.send("execute", "a", "code", "import asyncio\nawait asyncio.sleep(0.1)\n'a'")
	k.send("execute", "b", "code", "import time\ntime.sleep(0.6)\n'b'")
	order, _ := k.doneOrder("a", "b")
	if strings.Join(order, " ") != "b a" {
		t.Fatalf("dones in order %v: the synchronous cell did not hold the awaiting one", order)
	}
}

func TestAtMostSixteenCellsRunAtOnce(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	k.result("imp", "import asyncio")
	var ids []string
	for i := 0; i < 17; i++ {
		id := fmt.Sprintf("w%d", i)
		ids = append(ids, id)
		k.send("execute", id, "code", fmt.Sprintf("print('started', flush=True)\nawait asyncio.sleep(0.5)\n%d", i))
	}
	// The 17th starts only once one of the 16 before it has ended.
	var ended int
	for {
		f := k.next()
		if f.Event == "done" {
			ended++
		}
		if f.Event == "stream" && f.ID == "w16" {
			if ended == 0 {
				t.Fatalf("the 17th cell started while 16 ran")
			}
			break
		}
	}
	k.doneOrder("w16")
}

func TestInterruptingACellThatAwaitsCancelsIt(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	k.startCell("a", "import asyncio\nprint('go', flush=True)\nawait asyncio.sleep(3600)")
	if got := k.result("b", "'b runs'"); got != "'b runs'" {
		t.Fatalf("a cell while another awaits: %s", got)
	}
	k.send("interrupt", "a")
	got := k.until(isDone("a"))
	if d := got[len(got)-1]; d.str("status") != "interrupted" {
		t.Fatalf("interrupted awaiting cell: %s", d)
	}
	// One busy in a synchronous stretch after its await is interrupted there.
	k.startCell("c", "import asyncio\nawait asyncio.sleep(0)\nprint('busy', flush=True)\nwhile True:\n    pass")
	k.send("interrupt", "c")
	got = k.until(isDone("c"))
	if d := got[len(got)-1]; d.str("status") != "interrupted" {
		t.Fatalf("interrupted busy task: %s", d)
	}
	if got := k.result("d", "'alive'"); got != "'alive'" {
		t.Errorf("after: %s", got)
	}
}

func TestACellsTimeoutInterruptsItAtItsDeadline(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	for id, code := range map[string]string{
		"sync":  "import time\ntime.sleep(3600)",
		"busy":  "while True:\n    pass",
		"async": "import asyncio\nawait asyncio.sleep(3600)",
	} {
		k.send("execute", id, "code", code, "timeout_ms", 300)
		got := k.until(isDone(id))
		d := got[len(got)-1]
		if d.str("status") != "interrupted" || d.str("reason") != "timeout" || !strings.Contains(d.str("note"), "300 ms") {
			t.Errorf("%s cell past its timeout: %s", id, d)
		}
	}
	// A cell that ends in time is not interrupted later.
	k.send("execute", "quick", "code", "1", "timeout_ms", 200)
	k.until(isDone("quick"))
	k.send("execute", "after", "code", "import time\ntime.sleep(0.4)\n'after'")
	got := k.until(isDone("after"))
	if d := got[len(got)-1]; d.str("status") != "ok" {
		t.Errorf("a cell after one that ended in time: %s", d)
	}
}

func TestFdOutputWhileSeveralCellsRunIsNative(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	k.send("execute", "a", "code", "import asyncio\nawait asyncio.sleep(0.5)")
	k.send("execute", "b", "code", "import os\nos.write(1, b'from fd 1\\n')\nimport time\ntime.sleep(0.1)")
	_, frames := k.doneOrder("a", "b")
	if got := streamText(frames, "native", "stdout"); got != "from fd 1\n" {
		t.Errorf("native output %q; frames %v", got, frames)
	}
	// Alone, a cell's fd output is its own again.
	before, _ := k.execute("c", "import os\nos.write(1, b'mine\\n')")
	if got := streamText(before, "c", "stdout"); got != "mine\n" {
		t.Errorf("fd output of a cell alone: %q", got)
	}
}
