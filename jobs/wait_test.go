package jobs

import (
	"context"
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"
)

const tick = time.Millisecond

// TestPropWaitReturnsByDeadline runs Wait against a fake clock with a generated deadline
// and a generated end time (before the call, during the wait, at the deadline, after it,
// or never), and checks Wait's rule exactly: a passed deadline detaches at once; else
// Settled iff the end was recorded before the deadline; and Wait returns once the clock
// reaches the deadline, whatever else happens.
func TestPropWaitReturnsByDeadline(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		clock := newFakeClock()
		tb := newTable(t, TableOptions{Clock: clock})
		j := startJob(t, tb, Spec{Command: "job"})
		if err := j.Output([]byte("out\n")); err != nil {
			t.Fatal(err)
		}

		endBefore := rapid.IntRange(0, 3).Draw(t, "ticks ended before the call") // 0: not before
		deadline := rapid.IntRange(-3, 10).Draw(t, "deadline in ticks from the call")
		// The end's tick during the wait, drawn around the deadline (at or past it: not in time).
		endAt := max(1, deadline+rapid.IntRange(-4, 2).Draw(t, "end tick from the deadline"))
		if endBefore > 0 {
			if err := j.Finish(Exited(0)); err != nil {
				t.Fatal(err)
			}
			clock.Advance(time.Duration(endBefore) * tick)
		}
		call := clock.Now()
		dl := call.Add(time.Duration(deadline) * tick)

		result := make(chan Outcome, 1)
		go func() { result <- Wait(context.Background(), j, dl) }()

		passed := deadline <= 0
		wantSettled := !passed && (endBefore > 0 || endAt < deadline)

		// Let Wait either return or block on its timer before time moves.
		var got Outcome
		for got == nil && clock.Waiters() == 0 {
			select {
			case got = <-result:
			case <-time.After(100 * time.Microsecond):
			}
		}
		for k := 1; got == nil && k <= max(deadline, 0); k++ {
			if k == endAt && endBefore == 0 {
				// The end is recorded at tick k before any timer due then fires, so at
				// the deadline Wait sees the end first and must still detach.
				clock.Move(tick)
				_ = j.Finish(Exited(7))
				clock.Advance(0)
			} else {
				clock.Advance(tick)
			}
			if k < deadline {
				// Before the deadline, Wait returns only for an end.
				select {
				case got = <-result:
				default:
				}
			}
		}
		if got == nil {
			select {
			case got = <-result:
			case <-time.After(10 * time.Second):
				t.Fatalf("Wait did not return once the clock reached the deadline")
			}
		}
		if _, settled := got.(Settled); settled != wantSettled {
			t.Fatalf("Wait = %#v; want settled=%v (deadline %d, ended before %d, end tick %d)", got, wantSettled, deadline, endBefore, endAt)
		}
		if !clock.Now().After(dl) && !clock.Now().Equal(dl) && !wantSettled && !passed {
			t.Fatalf("detached before the deadline: now %v, deadline %v", clock.Now(), dl)
		}
		if got.Job() != j.ID() || string(got.SoFar().Kept) != "out\n" {
			t.Fatalf("outcome %#v lacks the job's output", got)
		}
	})
}

func TestWaitPassedDeadlineDetachesEvenWhenEnded(t *testing.T) {
	clock := newFakeClock()
	j := startJob(t, newTable(t, TableOptions{Clock: clock}), Spec{Command: "x"})
	if err := j.Finish(Exited(0)); err != nil {
		t.Fatal(err)
	}
	for _, dl := range []time.Time{{}, clock.Now(), clock.Now().Add(-time.Hour)} {
		if o, ok := Wait(context.Background(), j, dl).(Detached); !ok || o.Err != nil {
			t.Fatalf("Wait with a passed deadline %v = %#v, want Detached", dl, o)
		}
	}
	if _, ok := Wait(context.Background(), j, clock.Now().Add(tick)).(Settled); !ok {
		t.Fatal("Wait with time left on an ended job did not settle")
	}
}

func TestWaitContextCanceled(t *testing.T) {
	clock := newFakeClock()
	j := startJob(t, newTable(t, TableOptions{Clock: clock}), Spec{Command: "x"})
	cause := errors.New("caller gone")
	ctx, cancel := context.WithCancelCause(context.Background())
	result := make(chan Outcome, 1)
	go func() { result <- Wait(ctx, j, clock.Now().Add(time.Hour)) }()
	for clock.Waiters() == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	cancel(cause)
	o, ok := (<-result).(Detached)
	if !ok || !errors.Is(o.Err, cause) {
		t.Fatalf("Wait after cancel = %#v, want Detached with the cause", o)
	}
	if _, ended := j.End(); ended {
		t.Fatal("a canceled wait ended the job")
	}
}
