package jobs

import (
	"context"
	"time"

	"github.com/kennel-dev/kennel/output"
)

// Outcome is what a blocking wait on a job returns: Settled or Detached.
type Outcome interface {
	// Job returns the id of the job waited on.
	Job() ID
	// SoFar returns the job's output so far, bounded by its truncation.
	SoFar() output.Result
	isOutcome()
}

// Settled is a wait that saw the job's end before its deadline.
type Settled struct {
	ID     ID
	End    End
	Output output.Result
}

// Detached is a wait that reached its deadline (or its context ended) first; the job
// goes on in the background.
type Detached struct {
	ID     ID
	Output output.Result
	// Err is nil when the deadline passed, or the cause of ctx's end when the caller
	// gave up before it.
	Err error
}

// Job returns the job's id.
func (s Settled) Job() ID { return s.ID }

// SoFar returns the job's output, bounded.
func (s Settled) SoFar() output.Result { return s.Output }
func (Settled) isOutcome()             {}

// Job returns the job's id.
func (d Detached) Job() ID { return d.ID }

// SoFar returns the job's output so far, bounded.
func (d Detached) SoFar() output.Result { return d.Output }
func (Detached) isOutcome()             {}

// Wait is the one blocking wait on a job: every caller that blocks on a job (a cell's
// call, a job wait, a stop, a shell call) waits through it. It returns Settled with the
// job's own end when the job ended before deadline, else Detached at the deadline, by the
// job's table clock. The rule is exact:
//
//   - A deadline already passed when Wait is called (now >= deadline, including the zero
//     time) detaches at once, even when the end is ready.
//   - Otherwise the outcome is Settled if and only if the job's end was recorded at a time
//     before deadline, whichever of the end and the timer Wait notices first.
//   - When ctx ends first, Wait returns at once: Settled if the job had ended before the
//     deadline, else Detached with the context's cause.
//
// Wait never records an end and never kills.
func Wait(ctx context.Context, j *Job, deadline time.Time) Outcome {
	clock := j.clock
	if !clock.Now().Before(deadline) {
		return j.detached(nil)
	}
	if ctx.Err() == nil {
		timer := clock.After(deadline.Sub(clock.Now()))
		select {
		case <-j.done:
		case <-timer:
		case <-ctx.Done():
		}
	}
	if o, ok := j.settled(deadline); ok {
		return o
	}
	return j.detached(context.Cause(ctx)) // nil while ctx goes on
}

// settled returns Settled when the job's end was recorded before deadline. The output
// is read once the end is known, so it is the job's whole output.
func (j *Job) settled(deadline time.Time) (Outcome, bool) {
	j.mu.Lock()
	if j.end == nil || !j.endAt.Before(deadline) {
		j.mu.Unlock()
		return nil, false
	}
	end := j.end.clone()
	j.mu.Unlock()
	return Settled{ID: j.id, End: end, Output: j.soFar()}, true
}

func (j *Job) detached(err error) Outcome {
	return Detached{ID: j.id, Output: j.soFar(), Err: err}
}
