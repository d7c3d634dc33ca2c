package images

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"
)

const endsFunctions = `
import asyncio, time

@kennel.remote
def add(a: int) -> int:
    return a + 1

@kennel.remote
def slow() -> str:
    time.sleep(0.05)
    return "slept"

@kennel.remote
async def later() -> str:
    await asyncio.sleep(0.02)
    return "later"

@kennel.remote
def die():
    import os
    os._exit(0)
`

// TestAnyFrameInterleavingGivesEachCellAndCallOneDone: executes, calls, interrupts (of
// any id: running, queued, not sent yet, a call's, a finished one's) and a kernel exit,
// sent in any order, give each cell and call id at most one done; with no exit, exactly
// one.
func TestAnyFrameInterleavingGivesEachCellAndCallOneDone(t *testing.T) {
	t.Parallel()
	var k *kernel
	fresh := func() {
		k = startKernel(t, kernelOpts{})
		if _, done := k.register("reg", endsFunctions); done.str("status") != "ok" {
			t.Fatalf("registering cell: %s", done)
		}
	}
	fresh()
	round := 0
	rapid.Check(t, func(rt *rapid.T) {
		round++
		n := rapid.IntRange(1, 10).Draw(rt, "frames")
		want := map[string]bool{} // ids that must get a done
		exited := false
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("x%d_%d", round, i)
			// An exit is drawn rarely: it costs a kernel start.
			op := rapid.IntRange(0, 36).Draw(rt, fmt.Sprintf("op%d", i))
			if op < 36 {
				op %= 12
			} else {
				op = 12
			}
			switch {
			case op <= 2:
				code := []string{"1 + 1", "import time\ntime.sleep(0.05)", "raise ValueError('x')"}[op]
				if rapid.Bool().Draw(rt, fmt.Sprintf("async%d", i)) {
					code = []string{"import asyncio\nawait asyncio.sleep(0)", "import asyncio\nawait asyncio.sleep(0.05)", "import asyncio\nawait asyncio.sleep(0)\nraise ValueError('x')"}[op]
				}
				k.send("execute", id, "code", code)
				want[id] = true
			case op <= 5:
				fn := []string{"add", "slow", "later"}[op-3]
				args := map[string]any{}
				if fn == "add" {
					args["a"] = 1
				}
				k.send("call", id, "module", "__main__", "function", fn, "args", args)
				want[id] = true
			case op <= 8:
				// An interrupt of an id sent, of one to come, of one never sent.
				j := rapid.IntRange(0, n).Draw(rt, fmt.Sprintf("target%d", i))
				k.send("interrupt", fmt.Sprintf("x%d_%d", round, j))
			case op <= 11:
				time.Sleep(time.Duration(op-8) * 10 * time.Millisecond)
			default:
				// A call, so that no interrupt can cancel the exit.
				k.send("call", id, "module", "__main__", "function", "die", "args", map[string]any{})
				exited = true
			}
			if exited {
				break
			}
		}
		dones := map[string]int{}
		if !exited {
			// Every cell and call ends (calls on their own lanes, in any order), then
			// one more cell, after which none of them may end again.
			want["end"] = true
			k.send("execute", "end", "code", "1")
			for len(want) > 0 {
				if f := k.next(); f.Event == "done" {
					dones[f.ID]++
					delete(want, f.ID)
				}
			}
			k.send("execute", "sync", "code", "1")
			for f := range k.framesUntil(isDone("sync")) {
				if f.Event == "done" {
					dones[f.ID]++
				}
			}
		} else {
			for f := range k.framesUntilExit() {
				if f.Event == "done" {
					dones[f.ID]++
				}
			}
		}
		for id, c := range dones {
			if c > 1 {
				rt.Fatalf("%s got %d dones", id, c)
			}
		}
		if exited {
			fresh()
		}
	})
}

// framesUntil yields the frames up to and including the first for which pred holds.
func (k *kernel) framesUntil(pred func(frame) bool) func(func(frame) bool) {
	return func(yield func(frame) bool) {
		for _, f := range k.until(pred) {
			if !yield(f) {
				return
			}
		}
	}
}

// framesUntilExit yields every frame until the kernel's stdout ends.
func (k *kernel) framesUntilExit() func(func(frame) bool) {
	return func(yield func(frame) bool) {
		timeout := time.After(wait)
		for {
			select {
			case f, ok := <-k.frames:
				if !ok {
					return
				}
				if f.Err != nil {
					k.t.Fatalf("bad frame: %v", f.Err)
				}
				if !yield(f) {
					return
				}
			case <-timeout:
				k.t.Fatalf("the kernel did not exit within %v", wait)
			}
		}
	}
}
