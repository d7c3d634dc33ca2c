package jobs

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/kennel-dev/kennel/output"
)

func TestObserveListsLiveJobsInIDOrder(t *testing.T) {
	clock := newFakeClock()
	tb := newTable(t, TableOptions{Clock: clock})
	var all []*Job
	for i := range 150 {
		spec := Spec{Command: "cmd"}
		if i%2 == 0 {
			spec.PID = 1000 + i
		}
		all = append(all, startJob(t, tb, spec))
		clock.Advance(time.Millisecond)
	}
	for i, j := range all {
		if i%3 == 0 {
			if err := j.Finish(Exited(0)); err != nil {
				t.Fatal(err)
			}
		}
	}
	o := tb.Observe()
	if o.LiveJobCount != 100 || len(o.RunningJobs) != MaxObserved {
		t.Fatalf("live %d, listed %d; want 100, 100", o.LiveJobCount, len(o.RunningJobs))
	}
	for i, ob := range o.RunningJobs {
		if i > 0 && ob.ID <= o.RunningJobs[i-1].ID {
			t.Fatalf("not in id order: %v after %v", ob.ID, o.RunningJobs[i-1].ID)
		}
		j, _ := tb.Job(ob.ID)
		if _, ended := j.End(); ended {
			t.Fatalf("ended job %v listed", ob.ID)
		}
		n := int(ob.ID) - 1
		if (ob.PID == nil) != (n%2 == 1) || ob.PID != nil && *ob.PID != 1000+n {
			t.Fatalf("job %v pid %v", ob.ID, ob.PID)
		}
		if ob.StartedAt != j.Started().UnixMilli() {
			t.Fatalf("started_at %d, want %d", ob.StartedAt, j.Started().UnixMilli())
		}
	}
	// j9 comes before j10: numeric order, not lexical.
	if o.RunningJobs[5].ID != 9 || o.RunningJobs[6].ID != 11 {
		t.Fatalf("order around j9..j11: %v %v", o.RunningJobs[5].ID, o.RunningJobs[6].ID)
	}
	b, err := json.Marshal(o.RunningJobs[:2])
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"id":"j2","pid":null,"command":"cmd","started_at":1700000000001},{"id":"j3","pid":1002,"command":"cmd","started_at":1700000000002}]`
	if string(b) != want {
		t.Fatalf("json\n got %s\nwant %s", b, want)
	}
	if b, _ := json.Marshal(newTable(t, TableOptions{}).Observe()); string(b) != `{"live_job_count":0,"running_jobs":[]}` {
		t.Fatalf("empty observation %s", b)
	}
}

func TestCommandIsCutAtScalars(t *testing.T) {
	tb := newTable(t, TableOptions{})
	long := strings.Repeat("é", MaxCommand+10)
	j := startJob(t, tb, Spec{Command: long})
	if n := utf8.RuneCountInString(j.Command()); n != MaxCommand || !strings.HasPrefix(long, j.Command()) {
		t.Fatalf("command kept %d scalars", n)
	}
	if got := tb.Observe().RunningJobs[0].Command; got != j.Command() {
		t.Fatal("observation command differs")
	}
}

func TestTableKeepsRetainedEndedJobs(t *testing.T) {
	tb := newTable(t, TableOptions{Retain: 3})
	live := startJob(t, tb, Spec{Command: "live"})
	var ended []*Job
	for range 6 {
		j := startJob(t, tb, Spec{Command: "x"})
		if err := j.Finish(Exited(0)); err != nil {
			t.Fatal(err)
		}
		ended = append(ended, j)
	}
	startJob(t, tb, Spec{Command: "trigger"}) // eviction runs at start
	if _, ok := tb.Job(live.ID()); !ok {
		t.Fatal("a live job was evicted")
	}
	for i, j := range ended {
		_, ok := tb.Job(j.ID())
		if want := i >= 3; ok != want {
			t.Fatalf("ended job %v kept=%v, want %v (the 3 newest)", j.ID(), ok, want)
		}
	}
	if _, ok := tb.Job(999); ok {
		t.Fatal("found a job never started")
	}
}

func TestTableRefusesBadInput(t *testing.T) {
	if _, err := NewTable(TableOptions{Truncation: output.On(output.Limits{Bytes: -1})}); !errors.Is(err, output.ErrInvalidLimits) {
		t.Fatalf("NewTable with bad truncation = %v", err)
	}
	if _, err := NewTable(TableOptions{Capture: output.CaptureOptions{SpillDir: "/tmp"}}); !errors.Is(err, output.ErrNotPrivate) {
		t.Fatalf("NewTable with /tmp as spill dir = %v", err)
	}
	tb := newTable(t, TableOptions{})
	if _, err := tb.Start(Spec{Command: "x"}); !errors.Is(err, ErrNoOwner) {
		t.Fatalf("Start without owner = %v", err)
	}
	if _, err := tb.Start(Spec{Command: "x", Owner: &fakeOwner{}, PID: -1}); !errors.Is(err, ErrInvalidPID) {
		t.Fatalf("Start with pid -1 = %v", err)
	}
	bad := output.On(output.Limits{Keep: 9})
	if _, err := tb.Start(Spec{Command: "x", Owner: &fakeOwner{}, Truncation: &bad}); !errors.Is(err, output.ErrInvalidLimits) {
		t.Fatalf("Start with bad truncation = %v", err)
	}
	if o := tb.Observe(); o.LiveJobCount != 0 {
		t.Fatalf("refused starts left jobs: %+v", o)
	}
	if j := startJob(t, tb, Spec{Command: "x"}); j.ID() != 1 {
		t.Fatalf("refused starts used ids: first job is %v", j.ID())
	}
}
