package controller_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/protocol"
	"pgregory.net/rapid"
)

// propertyFunctions are the @remote functions of the property below: quick, slow, async
// and one that ends the kernel mid-call.
const propertyFunctions = `
import asyncio, os, time

@kennel.remote
def add(a: int, b: int = 1) -> int:
    return a + b

@kennel.remote
def slow(s: float) -> str:
    time.sleep(s)
    return "slept"

@kennel.remote
async def later(s: float) -> str:
    await asyncio.sleep(s)
    return "later"

@kennel.remote
def die():
    os._exit(7)
`

// The kinds of operation the property interleaves.
const (
	opCell      = iota // a quick cell
	opSlowCell         // a cell that sleeps
	opCall             // a quick call
	opSlowCall         // a call that sleeps on its thread
	opAsyncCall        // a call awaited on the kernel's loop
	opInterrupt        // ends the wait of an earlier slow cell (its interrupt)
	opExitCell         // a cell that ends the kernel
	opExitCall         // a call that ends the kernel mid-call
	opAsyncCell        // a cell that awaits: the next cells run meanwhile
	opKinds
)

var opNames = [...]string{"cell", "slow cell", "call", "slow call", "async call", "interrupt", "exit cell", "exit call", "async cell"}

// TestAnyInterleavingGivesEveryCellAndCallExactlyOneEnd: cells, @remote calls,
// interrupts and kernel exits, started concurrently in any order on one session, each
// end exactly once, within a bound, with an end their kind allows: a cell ok, interrupted
// (when an interrupt named it) or failed by the kernel's exit; a call its value,
// unreachable (the kernel ended under it), not_running (no kernel ran) or unknown (a
// fresh kernel that has not registered yet), never a timeout; and the session serves
// cells and calls again afterwards.
func TestAnyInterleavingGivesEveryCellAndCallExactlyOneEnd(t *testing.T) {
	s := startSession(t, controller.Options{BlockingBudget: 20 * time.Second, InterruptGrace: 10 * time.Second})
	register(t, s)
	ctx := context.Background()
	rapid.Check(t, func(rt *rapid.T) {
		if res, err := s.Execute(ctx, propertyFunctions, nil); err != nil || res.Status != protocol.DoneOK {
			rt.Fatalf("registering cell: %+v %v", res, err)
		}
		n := rapid.IntRange(1, 8).Draw(rt, "ops")
		kinds := make([]int, n)
		targets := make([]int, n)
		delays := make([]time.Duration, n)
		for i := range kinds {
			// Exits are drawn less often than the rest: each costs a kernel start.
			k := rapid.IntRange(0, 2*opKinds).Draw(rt, fmt.Sprintf("kind%d", i))
			switch {
			case k >= opKinds:
				k %= opExitCell
			case k == opExitCell || k == opExitCall:
			default:
				if rapid.Bool().Draw(rt, fmt.Sprintf("async%d", i)) {
					k = opAsyncCell
				}
			}
			kinds[i] = k
			targets[i] = rapid.IntRange(0, n-1).Draw(rt, fmt.Sprintf("target%d", i))
			delays[i] = time.Duration(rapid.IntRange(0, 30).Draw(rt, fmt.Sprintf("delay%d", i))) * time.Millisecond
		}
		exits := false
		for _, k := range kinds {
			exits = exits || k == opExitCell || k == opExitCall
		}
		type end struct {
			n      atomic.Int32
			res    *controller.CellResult
			call   *controller.CallResult
			err    error
			cancel context.CancelFunc
			ready  chan struct{} // closed once cancel is set
		}
		ends := make([]*end, n)
		for i := range ends {
			ends[i] = &end{ready: make(chan struct{})}
		}
		interrupted := make([]atomic.Bool, n)
		var wg sync.WaitGroup
		for i, k := range kinds {
			e := ends[i]
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(delays[i])
				cctx, cancel := context.WithCancel(ctx)
				defer cancel()
				e.cancel = cancel
				close(e.ready)
				switch k {
				case opCell:
					e.res, e.err = s.Execute(cctx, "1 + 1", nil)
				case opSlowCell:
					e.res, e.err = s.Execute(cctx, "import time\ntime.sleep(0.1)\n'slept'", nil)
				case opExitCell:
					e.res, e.err = s.Execute(cctx, "import os\nos._exit(9)", nil)
				case opAsyncCell:
					e.res, e.err = s.Execute(cctx, "import asyncio\nawait asyncio.sleep(0.1)\n'awaited'", nil)
				case opCall:
					e.call, e.err = s.Call(cctx, "add", []byte(`{"a": 1}`), controller.CallOptions{})
				case opSlowCall:
					e.call, e.err = s.Call(cctx, "slow", []byte(`{"s": 0.1}`), controller.CallOptions{})
				case opAsyncCall:
					e.call, e.err = s.Call(cctx, "later", []byte(`{"s": 0.05}`), controller.CallOptions{})
				case opExitCall:
					e.call, e.err = s.Call(cctx, "die", nil, controller.CallOptions{})
				case opInterrupt:
					target := ends[targets[i]]
					if tk := kinds[targets[i]]; tk == opSlowCell || tk == opAsyncCell {
						<-target.ready
						interrupted[targets[i]].Store(true)
						target.cancel()
					}
				}
				e.n.Add(1)
			}()
		}
		all := make(chan struct{})
		go func() { wg.Wait(); close(all) }()
		select {
		case <-all:
		case <-time.After(60 * time.Second):
			rt.Fatalf("not every operation of %v ended within 60 s", names(kinds))
		}
		for i, e := range ends {
			if got := e.n.Load(); got != 1 {
				rt.Fatalf("op %d (%s) ended %d times", i, opNames[kinds[i]], got)
			}
			k := kinds[i]
			switch k {
			case opCell, opSlowCell, opExitCell, opAsyncCell:
				switch {
				case e.err != nil && errors.Is(e.err, controller.ErrKernelExited) && (exits || interrupted[i].Load()):
				case e.err != nil && errors.Is(e.err, context.Canceled) && interrupted[i].Load():
				case e.err == nil && k != opExitCell && e.res.Status == protocol.DoneOK:
				case e.err == nil && e.res.Status == protocol.DoneInterrupted && interrupted[i].Load():
				default:
					rt.Fatalf("op %d (%s) of %v ended with %+v %v", i, opNames[k], names(kinds), e.res, e.err)
				}
			case opCall, opSlowCall, opAsyncCall, opExitCall:
				var rce *controller.RemoteCallError
				switch {
				case e.err == nil && k != opExitCall:
				case errors.As(e.err, &rce) && exits && (rce.Code == controller.CallUnreachable || rce.Code == controller.CallNotRunning || rce.Code == controller.CallUnknown):
				default:
					rt.Fatalf("op %d (%s) of %v ended with %+v %v", i, opNames[k], names(kinds), e.call, e.err)
				}
			}
		}
		// The session serves cells and calls again.
		if res, err := s.Execute(ctx, propertyFunctions, nil); err != nil || res.Status != protocol.DoneOK {
			rt.Fatalf("a cell after %v: %+v %v", names(kinds), res, err)
		}
		if res, err := s.Call(ctx, "add", []byte(`{"a": 2}`), controller.CallOptions{}); err != nil || string(res.Value) != "3" {
			rt.Fatalf("a call after %v: %+v %v", names(kinds), res, err)
		}
	})
}

func names(kinds []int) []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = opNames[k]
	}
	return out
}
