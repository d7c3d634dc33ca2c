package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/kennel-dev/kennel/jobs"
)

// ErrNoCell: no cell of that id is known to the session (never run as a job, or its job
// was dropped from the table's retention).
var ErrNoCell = errdefs.ErrNotFound.WithMessage("no such cell")

// CellOptions configure one cell run by Session.RunCell.
type CellOptions struct {
	// ID is the cell's id: "" takes a fresh one (NextCellID); see ExecuteCell for a
	// reserved one or one an earlier controller sent.
	ID string
	// Budget is how long RunCell waits for the cell before it answers Detached (the
	// reference's "backgrounded") with the output so far and goes on in the background;
	// <= 0 answers at once.
	Budget time.Duration
	// Timeout is the cell's own deadline, kept by the kernel: past it the cell is
	// interrupted (its result has Reason "timeout"), also when RunCell answered long
	// before. Zero means none.
	Timeout time.Duration
	// Sink receives the cell's output as it comes (nil drops it), on the reader
	// goroutine: it must not block.
	Sink Sink
}

// RunCell runs code as one cell tracked as a job, as ExecuteCell does, with opts: it
// answers Settled when the cell ends within opts.Budget, else Detached with the job's id
// and the output so far while the cell goes on (read it later with ReadCell or WaitJob;
// Subscribe tells of its end). While a cell awaits at top level, the kernel runs the next
// cells (at most 16 at once; a cell that does not await holds the others until it ends).
func (s *Session) RunCell(ctx context.Context, code string, opts CellOptions) (JobWait, error) {
	id := opts.ID
	if id == "" {
		id = s.NextCellID()
	}
	var timeout int64
	if opts.Timeout > 0 {
		timeout = max(1, opts.Timeout.Milliseconds())
	}
	return s.executeCell(ctx, id, code, opts.Budget, timeout, opts.Sink)
}

// ReadCell reads cell id (the cell's id, or its job's), run as a job, without waiting:
// Settled with its result (JobWait.Cell, or JobWait.Err when it ended without its own
// end) once it has ended, else Detached with its output so far. An id the session does
// not know (or whose job the table no longer holds) is ErrNoCell.
func (s *Session) ReadCell(id string) (JobWait, error) {
	r := s.cellRun(id)
	if r == nil {
		return JobWait{}, fmt.Errorf("cell %s: %w", id, ErrNoCell)
	}
	// A context already ended makes the wait answer at once: Settled when the job
	// ended, else Detached.
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errReadNow)
	w := r.wait(ctx, s.jobs.table.Clock().Now().Add(24*time.Hour))
	if d, ok := w.Outcome.(jobs.Detached); ok && errors.Is(d.Err, errReadNow) {
		d.Err = nil
		w.Outcome = d
	}
	return w, nil
}

var errReadNow = errors.New("read without waiting")

// cellRun finds the job run of cell id among the jobs the table holds.
func (s *Session) cellRun(id string) *jobRun {
	js := &s.jobs
	js.mu.Lock()
	var found *jobRun
	for _, r := range js.runs {
		if r.kind == cellJob && (r.frameID == id || r.job.ID().String() == id) {
			found = r
			break
		}
	}
	js.mu.Unlock()
	if found == nil {
		return nil
	}
	if _, held := js.table.Job(found.job.ID()); !held {
		return nil
	}
	return found
}

// cellFinished tells the subscribers that cell job r ended (once: it runs from the
// cell's one end).
func (s *Session) cellFinished(r *jobRun) {
	end, _ := r.job.End()
	r.mu.Lock()
	ev := Event{Type: EventCell, Cell: r.frameID, Job: r.job.ID(), End: end, Result: r.result, Err: r.cause}
	r.mu.Unlock()
	s.events.publish(ev)
}

// watchJob tells the subscribers when shell job job ends.
func (s *Session) watchJob(job *jobs.Job) {
	go func() {
		<-job.Done()
		end, _ := job.End()
		var cause error
		if r, err := s.jobs.get(job.ID()); err == nil {
			r.mu.Lock()
			cause = r.cause
			r.mu.Unlock()
		}
		s.events.publish(Event{Type: EventJob, Job: job.ID(), End: end, Err: cause})
	}()
}

// kernelState tells the subscribers that the kernel changed state.
func (s *Session) kernelState(state string, pid int, cause error) {
	s.events.publish(Event{Type: EventKernel, State: state, PID: pid, Err: cause})
}
