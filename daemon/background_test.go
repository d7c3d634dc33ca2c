package daemon_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/daemon"
)

// eventLog follows a session's event stream in the background.
type eventLog struct {
	mu     sync.Mutex
	events []api.SessionEvent
	more   chan struct{}
	stop   context.CancelFunc
	ended  chan struct{}
}

func followEvents(t *testing.T, r *running, session string) *eventLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &eventLog{more: make(chan struct{}, 1), stop: cancel, ended: make(chan struct{})}
	go func() {
		defer close(l.ended)
		_ = r.c.Events(ctx, session, func(ev api.SessionEvent) bool {
			l.mu.Lock()
			l.events = append(l.events, ev)
			l.mu.Unlock()
			select {
			case l.more <- struct{}{}:
			default:
			}
			return true
		})
	}()
	t.Cleanup(func() { cancel(); <-l.ended })
	return l
}

// await waits for an event pred takes, and returns every event so far.
func (l *eventLog) await(t *testing.T, what string, pred func(api.SessionEvent) bool) []api.SessionEvent {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		l.mu.Lock()
		evs := append([]api.SessionEvent(nil), l.events...)
		l.mu.Unlock()
		for _, ev := range evs {
			if pred(ev) {
				return evs
			}
		}
		select {
		case <-l.more:
		case <-deadline:
			t.Fatalf("no event %s within 30 s; events: %+v", what, evs)
		}
	}
}

func TestABackgroundedCellIsReadByIDAndAnnouncedOnce(t *testing.T) {
	r := serve(t, daemon.Options{})
	ctx := context.Background()
	s := r.newSession(t)
	events := followEvents(t, r, s.ID)
	// The stream is live once it tells of a job that ends after it was opened.
	for i := 0; ; i++ {
		job, err := r.c.RunJob(ctx, s.ID, "true")
		if err != nil {
			t.Fatal(err)
		}
		found := false
		deadline := time.Now().Add(200 * time.Millisecond)
		for !found && time.Now().Before(deadline) {
			events.mu.Lock()
			for _, ev := range events.events {
				found = found || (ev.Type == "job" && ev.Job == job.ID && ev.End != nil && ev.End.Text == "exit 0")
			}
			events.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
		if found {
			break
		}
		if i > 100 {
			t.Fatal("the event stream tells of no job's end")
		}
	}

	// A 3 s cell that awaits, under a 1 s budget: detached, with its id.
	slow, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "import asyncio\nprint('begun', flush=True)\nawait asyncio.sleep(3)\n'slow done'", BudgetMS: ms(1000)})
	if err != nil || slow.State != "backgrounded" || slow.CellID == "" || slow.Output.Text != "begun\n" {
		t.Fatalf("the slow cell: %+v %v", slow, err)
	}
	// Another cell runs and ends meanwhile.
	quick, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "6 * 7"})
	if err != nil || quick.State != "settled" || quick.Cell == nil || *quick.Cell.Result != "42" {
		t.Fatalf("a cell beside the backgrounded one: %+v %v", quick, err)
	}
	if read, err := r.c.ReadCell(ctx, s.ID, slow.CellID); err != nil || read.State != "running" || read.Output.Text != "begun\n" {
		t.Fatalf("the running cell read by id: %+v %v", read, err)
	}
	// Its end is announced once, and its result read by id (or by its job's).
	events.await(t, "of the slow cell's end", func(ev api.SessionEvent) bool { return ev.Type == "cell" && ev.CellID == slow.CellID })
	for _, id := range []string{slow.CellID, slow.Job} {
		read, err := r.c.ReadCell(ctx, s.ID, id)
		if err != nil || read.State != "settled" || read.Cell == nil || read.Cell.Result == nil || *read.Cell.Result != "'slow done'" {
			t.Fatalf("the ended cell read by %s: %+v %v", id, read, err)
		}
	}
	// A synchronous cell's own deadline fires after its request detached.
	held, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "import time\ntime.sleep(60)", BudgetMS: ms(100), TimeoutMS: ms(600)})
	if err != nil || held.State != "backgrounded" {
		t.Fatalf("the held cell: %+v %v", held, err)
	}
	evs := events.await(t, "of the held cell's end", func(ev api.SessionEvent) bool { return ev.Type == "cell" && ev.CellID == held.CellID })
	n := 0
	for _, ev := range evs {
		if ev.Type == "cell" && ev.CellID == slow.CellID {
			n++
		}
		if ev.Type == "cell" && ev.CellID == held.CellID && (ev.Cell == nil || ev.Cell.Status != "interrupted" || ev.Cell.Reason != "timeout") {
			t.Errorf("the held cell's end: %+v", ev)
		}
	}
	if n != 1 {
		t.Errorf("the slow cell's end was announced %d times", n)
	}
	if _, err := r.c.ReadCell(ctx, s.ID, "c999"); apiCode(t, err) != api.CodeNotFound {
		t.Errorf("an unknown cell: %v", err)
	}
	// The kernel's end and its successor are events too.
	if _, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "import os\nos._exit(3)"}); err != nil {
		t.Fatal(err)
	}
	events.await(t, "of the kernel's end", func(ev api.SessionEvent) bool { return ev.Type == "kernel" && ev.State == "ended" })
	if _, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "1"}); err != nil {
		t.Fatal(err)
	}
	events.await(t, "of a fresh kernel", func(ev api.SessionEvent) bool { return ev.Type == "kernel" && ev.State == "running" && ev.PID != nil })
}

func TestTheSeventeenthCellThatAwaitsWaitsForASlot(t *testing.T) {
	r := serve(t, daemon.Options{})
	ctx := context.Background()
	s := r.newSession(t)
	var cells []*api.CellReply
	for i := 0; i < 17; i++ {
		rep, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: fmt.Sprintf("import asyncio\nprint('started %d', flush=True)\nawait asyncio.sleep(3600)", i), BudgetMS: ms(0)})
		if err != nil || rep.State != "backgrounded" {
			t.Fatalf("cell %d: %+v %v", i, rep, err)
		}
		cells = append(cells, rep)
	}
	outputOf := func(c *api.CellReply) string {
		read, err := r.c.ReadCell(ctx, s.ID, c.CellID)
		if err != nil {
			t.Fatal(err)
		}
		return read.Output.Text
	}
	for i, c := range cells[:16] {
		for deadline := time.Now().Add(30 * time.Second); outputOf(c) != fmt.Sprintf("started %d\n", i); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("cell %d did not start", i)
			}
		}
	}
	if out := outputOf(cells[16]); out != "" {
		t.Fatalf("the 17th cell started with 16 running: %q", out)
	}
	// One ends: the 17th starts.
	if _, err := r.c.StopJob(ctx, s.ID, cells[0].Job); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.HasPrefix(outputOf(cells[16]), "started 16"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the 17th cell did not start once a slot was free")
		}
	}
}
