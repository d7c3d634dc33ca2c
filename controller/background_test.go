package controller_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/protocol"
)

// nextEvent waits for the subscription's next event of type typ.
func nextEvent(t *testing.T, sub *controller.Subscription, typ string) controller.Event {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		for _, ev := range sub.Next() {
			if ev.Type == typ {
				return ev
			}
		}
		select {
		case <-sub.Ready():
		case <-deadline:
			t.Fatalf("no %s event within 30 s", typ)
		}
	}
}

func TestACellPastItsBudgetIsReadByIDAndItsEndIsAnEvent(t *testing.T) {
	s := startSession(t, controller.Options{})
	ctx := context.Background()
	sub := s.Subscribe()
	defer sub.Close()
	jw, err := s.RunCell(ctx, "import asyncio\nprint('begun', flush=True)\nawait asyncio.sleep(0.5)\n'late'", controller.CellOptions{ID: "bg1", Budget: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := jw.Outcome.(jobs.Detached); !ok {
		t.Fatalf("a 0.5 s cell under a 50 ms budget: %+v", jw)
	}
	// The next cell runs while it awaits.
	if res, _ := execute(t, s, "6 * 7"); res.Result == nil || *res.Result != "42" {
		t.Fatalf("a cell beside it: %+v", res)
	}
	if w, err := s.ReadCell("bg1"); err != nil || w.Cell != nil {
		t.Fatalf("reading the running cell: %+v %v", w, err)
	} else if _, ok := w.Outcome.(jobs.Detached); !ok || string(w.Outcome.SoFar().Kept) != "begun\n" {
		t.Fatalf("reading the running cell: %+v", w)
	}
	ev := nextEvent(t, sub, controller.EventCell)
	if ev.Cell != "bg1" || ev.Result == nil || ev.Result.Status != protocol.DoneOK || *ev.Result.Result != "'late'" {
		t.Fatalf("the cell's end: %+v", ev)
	}
	w, err := s.ReadCell("bg1")
	if err != nil || w.Cell == nil || *w.Cell.Result != "'late'" {
		t.Fatalf("reading the ended cell: %+v %v", w, err)
	}
	if _, err := s.ReadCell("nope"); !errors.Is(err, controller.ErrNoCell) {
		t.Fatalf("an unknown cell: %v", err)
	}
	// Its own timeout interrupts a synchronous cell after the call returned.
	jw, err = s.RunCell(ctx, "import time\ntime.sleep(60)", controller.CellOptions{ID: "held", Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ev = nextEvent(t, sub, controller.EventCell)
	if ev.Cell != "held" || ev.Result == nil || ev.Result.Status != protocol.DoneInterrupted || ev.Result.Reason != "timeout" {
		t.Fatalf("the held cell's end: %+v", ev)
	}
	// A shell job's end and the kernel's are events too.
	job, err := s.RunJob(ctx, "exit 3", controller.JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, sub, controller.EventJob); ev.Job != job.ID() || ev.End.ExitCode == nil || *ev.End.ExitCode != 3 {
		t.Fatalf("the job's end: %+v", ev)
	}
	if _, err := s.Execute(ctx, "import os\nos._exit(1)", nil); !errors.Is(err, controller.ErrKernelExited) {
		t.Fatalf("a cell that ends its kernel: %v", err)
	}
	if ev := nextEvent(t, sub, controller.EventKernel); ev.State != controller.KernelEnded {
		t.Fatalf("the kernel's end: %+v", ev)
	}
}
