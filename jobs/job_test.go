package jobs

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/output"
	"pgregory.net/rapid"
)

// TestPropOneEndPerJob drives jobs with generated sequences of output, exits, kills
// (that succeed or fail), pids, ticks and late events, and checks the job laws after
// every step: exactly one end, and only after an exit or signal is reported; the end is
// the first one reported; nothing after it is kept; a kill never ends a job by itself;
// kept + dropped = every byte accepted, within the cap.
func TestPropOneEndPerJob(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		clock := newFakeClock()
		var tr output.Truncation
		if rapid.Bool().Draw(t, "off") {
			tr = output.Off()
		} else {
			tr = output.On(output.Limits{
				Bytes: rapid.Int64Range(1, 64).Draw(t, "cap bytes"),
				Lines: rapid.Int64Range(1, 5).Draw(t, "cap lines"),
				Keep:  rapid.SampledFrom([]output.Keep{output.Head, output.Tail}).Draw(t, "keep"),
			})
		}
		tb := newTable(t, TableOptions{Clock: clock, Truncation: tr, Capture: output.CaptureOptions{PrefixBytes: 32, TailBytes: 8}})
		owner := &fakeOwner{}
		j := startJob(t, tb, Spec{Command: "cmd", Owner: owner})

		var (
			accepted  []byte
			want      *End
			killed    bool
			late      Late
			kills     int
			endedTime time.Time
		)
		for range rapid.IntRange(1, 30).Draw(t, "events") {
			switch ev := rapid.IntRange(0, 6).Draw(t, "event"); ev {
			case 0, 1: // output
				p := []byte(rapid.StringOfN(rapid.SampledFrom([]rune{'a', '\n', 'é'}), 0, 20, 40).Draw(t, "bytes"))
				err := j.Output(p)
				if want != nil {
					late.Outputs++
					late.Bytes += int64(len(p))
					if !errors.Is(err, ErrEnded) {
						t.Fatalf("output after the end = %v", err)
					}
				} else {
					if err != nil {
						t.Fatalf("output = %v", err)
					}
					accepted = append(accepted, p...)
				}
			case 2: // exit or signal, sometimes invalid
				var e End
				switch rapid.IntRange(0, 3).Draw(t, "end kind") {
				case 0:
					e = Exited(rapid.IntRange(0, 255).Draw(t, "code"))
				case 1:
					e = Signaled(rapid.IntRange(1, 64).Draw(t, "signal"))
				case 2:
					e = End{Killed: true}
				default:
					e = Exited(300) // invalid: refused, changes nothing
				}
				err := j.Finish(e)
				switch {
				case e.validate() != nil:
					if !errors.Is(err, ErrInvalidEnd) {
						t.Fatalf("invalid end %v = %v", e, err)
					}
				case want != nil:
					late.Ends++
					if !errors.Is(err, ErrEnded) {
						t.Fatalf("second end = %v", err)
					}
				default:
					if err != nil {
						t.Fatalf("end = %v", err)
					}
					w := e.clone()
					w.Killed = w.Killed || killed
					want, endedTime = &w, clock.Now()
				}
			case 3: // kill, succeeding or failing
				fail := rapid.Bool().Draw(t, "kill fails")
				owner.mu.Lock()
				owner.err = nil
				if fail {
					owner.err = errors.New("no such process")
				}
				owner.mu.Unlock()
				err := j.Kill(context.Background())
				switch {
				case want != nil:
					late.Other++
					if !errors.Is(err, ErrEnded) {
						t.Fatalf("kill after the end = %v", err)
					}
				case fail:
					kills++
					if err == nil {
						t.Fatalf("failed kill returned nil")
					}
				default:
					kills++
					killed = true
					if err != nil {
						t.Fatalf("kill = %v", err)
					}
				}
			case 4: // pid
				err := j.SetPID(1234)
				if want != nil {
					late.Other++
					if !errors.Is(err, ErrEnded) {
						t.Fatalf("pid after the end = %v", err)
					}
				}
			case 5: // time passes
				clock.Advance(time.Millisecond)
			case 6: // output that is empty
				if err := j.Output(nil); want != nil {
					late.Outputs++
					if !errors.Is(err, ErrEnded) {
						t.Fatalf("empty output after end = %v", err)
					}
				}
			}

			// The laws, after every event.
			got, ended := j.End()
			if ended != (want != nil) || isClosed(j.Done()) != ended {
				t.Fatalf("ended=%v done=%v, want %v", ended, isClosed(j.Done()), want != nil)
			}
			if ended && (got.String() != want.String() || got.Killed != want.Killed) {
				t.Fatalf("end %v, want the first reported %v", got, *want)
			}
			if owner.count() != kills {
				t.Fatalf("owner saw %d kills, want %d", owner.count(), kills)
			}
			if j.Late() != late {
				t.Fatalf("late %+v, want %+v", j.Late(), late)
			}
			st := j.Capture().Stat()
			if st.Seen != int64(len(accepted)) || st.Closed != ended {
				t.Fatalf("capture saw %d bytes (closed %v), accepted %d", st.Seen, st.Closed, len(accepted))
			}
			res := j.Snapshot().Output
			whole, _ := output.Bound(accepted, tr)
			if res.TotalBytes != int64(len(accepted)) || res.KeptBytes+res.DroppedBytes != res.TotalBytes || res.KeptLines+res.DroppedLines != whole.TotalLines {
				t.Fatalf("output %+v not conserved for %q", res, accepted)
			}
			// The report is the window of every byte accepted when the bytes it comes
			// from were retained; else it comes from the retained bytes at its end.
			if windowRetained(st, tr) {
				if !bytes.Equal(res.Kept, whole.Kept) || res.KeptLines != whole.KeptLines {
					t.Fatalf("output %+v, want the window of %q", res, accepted)
				}
			} else if !retainedPart(res.Kept, accepted, st, tr) {
				t.Fatalf("output %+v of %q: the kept bytes are not retained bytes at the window's end (%+v)", res, accepted, st)
			}
			if tr.IsOff() && (res.DroppedBytes != 0) != !st.Complete {
				t.Fatalf("opt-out dropped %d bytes of a capture that retained all: %v", res.DroppedBytes, st.Complete)
			}
			if !tr.IsOff() && res.KeptBytes > tr.Limits().Bytes {
				t.Fatalf("kept %d over the cap", res.KeptBytes)
			}
		}
		if want != nil {
			if o, ok := Wait(context.Background(), j, clock.Now().Add(time.Millisecond)).(Settled); !ok || o.End.String() != want.String() || endedTime.After(clock.Now()) {
				t.Fatalf("wait reported %v (settled %v), want the job's own end %v", o, ok, *want)
			}
		}
	})
}

func TestKillGoesThroughTheOwnerAndDoesNotEnd(t *testing.T) {
	tb := newTable(t, TableOptions{})
	owner := &fakeOwner{}
	j := startJob(t, tb, Spec{Command: "sleep 100", Owner: owner})
	if err := j.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ended := j.End(); ended || owner.count() != 1 {
		t.Fatalf("after a kill: ended=%v kills=%d; want still running, one kill", ended, owner.count())
	}
	if err := j.Output([]byte("still writing\n")); err != nil {
		t.Fatalf("output between kill and end = %v", err)
	}
	if err := j.Finish(Signaled(15)); err != nil {
		t.Fatal(err)
	}
	end, _ := j.End()
	if !end.Killed || end.Signal != 15 || end.String() != "signal 15 (killed)" {
		t.Fatalf("end after kill = %v", end)
	}
	if err := j.Kill(context.Background()); !errors.Is(err, ErrEnded) || owner.count() != 1 {
		t.Fatalf("kill after the end = %v (owner called %d times)", err, owner.count())
	}

	owner.err = errors.New("operation not permitted")
	j2 := startJob(t, tb, Spec{Command: "x", Owner: owner})
	if err := j2.Kill(context.Background()); err == nil || !errors.Is(err, owner.err) {
		t.Fatalf("failed kill = %v, want the owner's error", err)
	}
	if err := j2.Finish(Exited(0)); err != nil {
		t.Fatal(err)
	}
	if end, _ := j2.End(); end.Killed {
		t.Fatalf("a job whose kill failed and that exited is marked killed: %v", end)
	}
}

func TestFinishRefusesImpossibleEnds(t *testing.T) {
	tb := newTable(t, TableOptions{})
	j := startJob(t, tb, Spec{Command: "x"})
	code := 1
	for _, e := range []End{Exited(-1), Exited(256), Signaled(-2), Signaled(200), {ExitCode: &code, Signal: 9},
		{Interrupted: true, Signal: 2}, {Interrupted: true, ExitCode: &code}, {Interrupted: true, Killed: true}} {
		if err := j.Finish(e); !errors.Is(err, ErrInvalidEnd) {
			t.Errorf("Finish(%+v) = %v, want ErrInvalidEnd", e, err)
		}
	}
	if _, ended := j.End(); ended {
		t.Fatal("an invalid end ended the job")
	}
	e := Exited(3)
	if err := j.Finish(e); err != nil {
		t.Fatal(err)
	}
	*e.ExitCode = 4 // the caller's int is not the job's
	if got, _ := j.End(); *got.ExitCode != 3 {
		t.Fatalf("end changed through the caller's pointer: %v", got)
	}
}

func TestSetPID(t *testing.T) {
	tb := newTable(t, TableOptions{})
	j := startJob(t, tb, Spec{Command: "x"})
	if _, ok := j.PID(); ok {
		t.Fatal("pid known before it was set")
	}
	for _, bad := range []int{0, -5} {
		if err := j.SetPID(bad); !errors.Is(err, ErrInvalidPID) {
			t.Errorf("SetPID(%d) = %v", bad, err)
		}
	}
	if err := j.SetPID(42); err != nil {
		t.Fatal(err)
	}
	if err := j.SetPID(42); err != nil {
		t.Fatalf("the same pid again = %v", err)
	}
	if err := j.SetPID(43); !errors.Is(err, ErrInvalidPID) {
		t.Fatalf("a second pid = %v", err)
	}
	if pid, ok := j.PID(); !ok || pid != 42 {
		t.Fatalf("PID = %d, %v", pid, ok)
	}
}

// TestWrittenBeforeDetachIsCounted: a cell that becomes a job counts the bytes it wrote
// before, so kept + dropped covers the whole run.
func TestWrittenBeforeDetachIsCounted(t *testing.T) {
	tb := newTable(t, TableOptions{Truncation: output.On(output.Limits{Bytes: 8, Keep: output.Tail})})
	j := startJob(t, tb, Spec{Command: "cell c3", Written: []byte("before\n")})
	if err := j.Output([]byte("after\n")); err != nil {
		t.Fatal(err)
	}
	res := j.Snapshot().Output
	if res.TotalBytes != 13 || string(res.Kept) != "after\n" || res.DroppedBytes != 7 {
		t.Fatalf("output %+v", res)
	}
	if !bytes.Contains([]byte(res.Notice()), []byte("full output: job j1")) {
		t.Fatalf("notice %q does not name the job", res.Notice())
	}
	if page, err := j.Capture().ReadPage(0, 100); err != nil || string(page.Data) != "before\nafter\n" {
		t.Fatalf("capture = %q, %v", page.Data, err)
	}
}

func TestAnInterruptedJobIsNotKilledEvenAfterAKill(t *testing.T) {
	tb := newTable(t, TableOptions{})
	killed := make(chan struct{})
	j := startJob(t, tb, Spec{Command: "x", Owner: OwnerFunc(func(context.Context) error { close(killed); return nil })})
	if err := j.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-killed
	if err := j.Finish(Interrupted()); err != nil {
		t.Fatal(err)
	}
	end, _ := j.End()
	if !end.Interrupted || end.Killed || end.Signal != 0 || end.ExitCode != nil || end.String() != "interrupted" {
		t.Fatalf("end of an interrupted job after a kill: %+v (%v)", end, end)
	}
}

// windowRetained reports whether the bytes the window of tr comes from (all, or the first
// or last Bytes+1) are retained in a capture of stat st.
func windowRetained(st output.CaptureStat, tr output.Truncation) bool {
	if st.Complete {
		return true
	}
	if tr.IsOff() {
		return false
	}
	l := tr.Limits()
	n := min(st.Seen, l.Bytes+1)
	if l.Keep == output.Head {
		return n <= st.Retained
	}
	return st.Seen-n >= st.TailFrom
}

// retainedPart reports whether kept is a run of text's bytes within what st retained, at
// the end tr keeps: from the start within [0, Retained) (head, off), or ending at the
// end within [TailFrom, Seen) (tail).
func retainedPart(kept, text []byte, st output.CaptureStat, tr output.Truncation) bool {
	n := int64(len(kept))
	if tr.IsOff() || tr.Limits().Keep == output.Head {
		return n <= st.Retained && bytes.Equal(kept, text[:n])
	}
	return n <= st.Seen-st.TailFrom && bytes.HasSuffix(text, kept)
}
