package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/protocol"
)

// ExecuteWait runs code as one cell tracked as a job from its start, and waits for it at
// most budget through jobs.Wait: Settled (with JobWait.Cell, or JobWait.Err when the cell
// could not run to its end) if the cell ends in time, else Detached with the job's id and
// the output so far, the cell going on as a background job (wait again with WaitJob,
// stop it with KillJob). A budget <= 0 detaches at once. The cell's output goes to the
// job's capture, bounded for reports by the session's truncation, and also to sink (nil
// drops it) on the reader goroutine: sink must not block.
//
// ctx bounds the start and the wait only: when it ends the wait returns Detached with its
// cause and the cell goes on. Killing a cell job interrupts it, and kills its kernel if it
// has not ended after Options.InterruptGrace. An error means the cell could not start.
func (s *Session) ExecuteWait(ctx context.Context, code string, budget time.Duration, sink Sink) (JobWait, error) {
	return s.ExecuteCell(ctx, s.NextCellID(), code, budget, sink)
}

// NextCellID reserves the id of a cell not sent yet, for ExecuteCell: a caller that must
// record a cell's id before it is sent (to drive it again after a restart).
func (s *Session) NextCellID() string { return s.nextID("c") }

// ExecuteCell is ExecuteWait for the cell of id cellID: one NextCellID reserved, or one an
// earlier controller sent to the kernel this session resumed. The kernel runs a cell of
// an id it never had; for one it ran it answers with that cell's done again (it keeps
// its newest 16), and one it is running ends with its own done: so a cell driven again
// after a restart runs at most once.
func (s *Session) ExecuteCell(ctx context.Context, cellID, code string, budget time.Duration, sink Sink) (JobWait, error) {
	return s.executeCell(ctx, cellID, code, budget, 0, sink)
}

// executeCell is ExecuteCell with the cell's own deadline, timeoutMS (0: none; see
// CellOptions.Timeout).
func (s *Session) executeCell(ctx context.Context, cellID, code string, budget time.Duration, timeoutMS int64, sink Sink) (JobWait, error) {
	deadline := s.jobs.table.Clock().Now().Add(budget)
	kc, err := s.kernel(ctx, false)
	if err != nil {
		return JobWait{}, err
	}
	r := &jobRun{s: s, kc: kc, kind: cellJob, frameID: cellID}
	job, err := s.jobs.table.Start(jobs.Spec{Command: firstLine(code), Owner: r})
	if err != nil {
		return JobWait{}, fmt.Errorf("cell %s: %w", cellID, err)
	}
	r.job = job
	r.cell = &cellRun{sink: cellJobSink{job: job, next: sink}, done: make(chan struct{})}
	r.cell.ended = r.cellEnded
	s.jobs.add(r)

	if err := track(kc, &kc.cells, cellID, r.cell); err != nil {
		r.endWithout(err, jobs.End{})
		return JobWait{}, fmt.Errorf("cell %s: %w", cellID, err)
	}
	if err := kc.writeFrame(ctx, protocol.Execute{ID: cellID, Code: code, TimeoutMS: timeoutMS}); err != nil {
		lookup(kc, &kc.cells, cellID, true)
		r.endWithout(err, jobs.End{})
		if ctx.Err() != nil {
			kc.stalled(cellID, err)
		}
		return JobWait{}, fmt.Errorf("cell %s: %w", cellID, err)
	}
	return r.wait(ctx, deadline), nil
}

// cellEnded ends a cell job once its cell has ended: the result first, then the end. It
// runs on the goroutine that ended the cell, without a hop of its own.
func (r *jobRun) cellEnded() {
	c := r.cell
	defer r.s.cellFinished(r)
	if c.err != nil {
		r.endWithout(c.err, jobs.End{})
		return
	}
	res := r.s.cellResult(r.frameID, c.res)
	r.mu.Lock()
	r.result = res
	r.mu.Unlock()
	r.finish(cellEnd(c.res.Status))
}

// cellEnd maps a cell's done status to a job end: ok exits 0, an exception exits 1, an
// interrupted cell is Interrupted (its kernel lives on: no signal ended a process).
func cellEnd(status string) jobs.End {
	switch status {
	case protocol.DoneOK:
		return jobs.Exited(0)
	case protocol.DoneError:
		return jobs.Exited(1)
	case protocol.DoneInterrupted:
		return jobs.Interrupted()
	}
	return jobs.End{}
}

// firstLine is a cell's command as a job shows it: its first line that is not blank.
func firstLine(code string) string {
	for line := range strings.Lines(code) {
		if t := strings.TrimSpace(line); t != "" {
			return t
		}
	}
	return ""
}

// cellJobSink writes a cell job's output to its job, then to the caller's sink.
type cellJobSink struct {
	job  *jobs.Job
	next Sink
}

func (c cellJobSink) Stream(name, text string) {
	_ = c.job.Output([]byte(text))
	if c.next != nil {
		c.next.Stream(name, text)
	}
}

// StreamText writes text to the job, then to the caller's sink: as bytes (with their
// JSON form) when it takes them, else as Stream does.
func (c cellJobSink) StreamText(name string, text, quoted []byte) {
	_ = c.job.Output(text)
	streamTo(c.next, name, text, quoted)
}

func (c cellJobSink) Display(data json.RawMessage) {
	WriterSink{Stdout: jobWriter{c.job}}.Display(data)
	if c.next != nil {
		c.next.Display(data)
	}
}

// jobWriter writes to a job's output.
type jobWriter struct{ job *jobs.Job }

func (w jobWriter) Write(p []byte) (int, error) {
	if err := w.job.Output(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// killCellAfterGrace kills the cell's kernel if the cell has not ended within the
// interrupt grace (the reference's S2 jobs 3).
func (r *jobRun) killCellAfterGrace() {
	grace := r.s.opts.InterruptGrace
	if closedWithin(r.cell.done, grace) {
		return
	}
	cause := fmt.Errorf("cell %s (job %s) did not stop within %v of its interrupt", r.frameID, r.job.ID(), grace)
	r.s.log.Warn("killed cell job ignored its interrupt; killing its kernel", "job", r.job.ID(), "cell", r.frameID)
	r.kc.fail(fmt.Errorf("%w: %w", ErrKernelExited, cause))
	_ = r.kc.kill(context.Background())
}
