package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/jobs"
)

// TestJobSetAnswersAsTheTableAndStaysBounded runs more cells than the table keeps: a job
// the table dropped is ErrNoJob for every call that looks a job up, even while its run
// waits for add's next prune, the kept ones still answer, and the runs stay below twice
// what the table holds (or minRunsPrune).
func TestJobSetAnswersAsTheTableAndStaysBounded(t *testing.T) {
	s := startFIFOSession(t)
	ctx := context.Background()
	const n = 5*jobs.DefaultRetain + 7
	var ids []jobs.ID
	for i := range n {
		jw, err := s.ExecuteWait(ctx, "1", time.Minute, nil)
		if err != nil || jw.Err != nil {
			t.Fatalf("cell %d: %v %v", i, err, jw.Err)
		}
		if _, ok := jw.Outcome.(jobs.Settled); !ok {
			t.Fatalf("cell %d did not settle: %+v", i, jw.Outcome)
		}
		ids = append(ids, jw.Outcome.Job())
		s.jobs.mu.Lock()
		runs := len(s.jobs.runs)
		s.jobs.mu.Unlock()
		// The table held at most held jobs at add's last prune, the one starting among them.
		if held := len(s.jobs.table.Observe().RunningJobs) + jobs.DefaultRetain + 1; runs >= max(2*held, minRunsPrune) {
			t.Fatalf("after cell %d: %d runs kept, the table holds at most %d jobs", i, runs, held)
		}
	}
	for i, id := range ids {
		_, inTable := s.jobs.table.Job(id)
		// The table drops ended jobs past Retain when a job starts: the last cell's end came
		// after the last start, so Retain+1 ended jobs are kept.
		if want := i >= n-jobs.DefaultRetain-1; inTable != want {
			t.Fatalf("job %s (cell %d) in the table: %v, want %v", id, i, inTable, want)
		}
		_, werr := s.WaitJob(ctx, id, 0)
		kerr := s.KillJob(ctx, id)
		_, serr := s.SaveOutput(ctx, id)
		if !inTable {
			for _, err := range []error{werr, kerr, serr} {
				if !errors.Is(err, ErrNoJob) {
					t.Fatalf("job %s, dropped by the table: %v, want ErrNoJob", id, err)
				}
			}
			continue
		}
		if werr != nil || !errors.Is(kerr, jobs.ErrEnded) || serr != nil {
			t.Fatalf("job %s, kept: wait %v, kill %v, save %v", id, werr, kerr, serr)
		}
	}
}
