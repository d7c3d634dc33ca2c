package controller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/output"
	"github.com/kennel-dev/kennel/protocol"
)

// Errors of jobs a caller decides on with errors.Is.
var (
	// ErrNoJob: the session has no job with that id (never started, or an ended job the
	// table no longer keeps).
	ErrNoJob = errdefs.ErrNotFound.WithMessage("no such job")
	// ErrInvalidCommand: a shell command /bin/sh -c cannot be given: not valid UTF-8, with
	// a NUL byte, or longer than MaxCommandBytes. Nothing was started.
	ErrInvalidCommand = errdefs.ErrInvalidArgument.WithMessage("invalid job command")
	// ErrEndedByController: the controller ended a killed job itself because its kernel did
	// not report the end within twice Options.JobKillGrace of the kill (a wedged kernel);
	// the job's process group had been killed by the controller and was empty.
	ErrEndedByController = errdefs.ErrAborted.WithMessage("job ended by the controller")
)

// JobOptions configure one shell job. The zero value uses the session's settings.
type JobOptions struct {
	// Truncation, when non-nil, bounds what this job reports instead of the session's
	// Options.Truncation (output.Resolve decides).
	Truncation *output.Truncation
}

// JobWait is what a blocking wait on a job returns.
type JobWait struct {
	// Outcome is jobs.Settled when the job ended before the deadline, else jobs.Detached
	// with the output so far; the job then goes on in the background.
	Outcome jobs.Outcome
	// Cell is how a cell job ended, once it settled with the kernel's done frame; nil for
	// shell jobs, while detached, and when the cell ended without one (see Err).
	Cell *CellResult
	// Err says, for a settled job, why it ended without its own end: its kernel ended
	// (ErrKernelExited, or ErrClosed when the session was closed), or the controller
	// ended it after a kill (ErrEndedByController). Nil otherwise.
	Err error
}

type jobKind uint8

const (
	shellJob jobKind = iota
	cellJob
)

// jobRun is the controller's side of one job: the kernel generation that runs it, the id
// its frames carry, and how to stop it. It is the job's jobs.Owner.
type jobRun struct {
	s       *Session
	kc      *kernelConn // its kernel; for a job an earlier controller started, nil until reattached (mu)
	kind    jobKind
	frameID string     // the job id (shell jobs) or the cell id (cell jobs)
	job     *jobs.Job  // set right after Table.Start, before any frame can name the job
	cell    *cellRun   // cell jobs
	streams jobStreams // shell jobs whose output comes beside the frames (see openJobStreams); nil for frames
	way     jobWay     // how: the way of streams, and its files as the kernel named them
	paths   [2]string
	started chan struct{} // shell jobs RunJob started: closed at job_start
	startMu sync.Once

	mu     sync.Mutex
	pgid   int         // shell jobs of a kernel with HostGroups: the group verified at job_start
	cause  error       // why the job ended without its own end
	result *CellResult // cell jobs: the result, set before the job's end
}

// endWithout ends the job with end, which is not its own (an unknown end when its kernel
// ended), recording cause as the reason when this end is the one that takes; a job's
// output files are read to their end first. r.mu is
// held across Finish, so a waiter woken by the end reads the cause that goes with it.
func (r *jobRun) endWithout(cause error, end jobs.End) {
	switch st := r.streams.(type) {
	case nil:
	case *jobFiles:
		// The files hold what the job wrote, its kernel gone or not: read them to their
		// end (at most JobKillGrace while the job writes on) before the end is taken.
		st.drain(r.s.opts.JobKillGrace)
	default:
		st.stop()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.job.Finish(end)
	switch {
	case err == nil:
		r.cause = cause
	case !errors.Is(err, jobs.ErrEnded):
		r.s.log.Warn("job end refused", "job", r.job.ID(), "err", err)
	}
}

// wait is the session's side of jobs.Wait: the outcome, and once settled what the
// controller knows about the end.
func (r *jobRun) wait(ctx context.Context, deadline time.Time) JobWait {
	o := jobs.Wait(ctx, r.job, deadline)
	w := JobWait{Outcome: o}
	if _, ok := o.(jobs.Settled); ok {
		r.mu.Lock()
		w.Cell, w.Err = r.result, r.cause
		r.mu.Unlock()
	}
	return w
}

// finish ends the job with its own end (the kernel's job_end, or the cell's done).
func (r *jobRun) finish(end jobs.End) {
	if err := r.job.Finish(end); err != nil && !errors.Is(err, jobs.ErrEnded) {
		r.s.log.Warn("job end refused", "job", r.job.ID(), "frame", r.frameID, "err", err)
	}
}

// WaitJob waits for job id at most budget through jobs.Wait (a budget <= 0 detaches at
// once); ctx ending returns Detached with its cause. An unknown id is ErrNoJob.
func (s *Session) WaitJob(ctx context.Context, id jobs.ID, budget time.Duration) (JobWait, error) {
	r, err := s.jobs.get(id)
	if err != nil {
		return JobWait{}, err
	}
	return r.wait(ctx, s.jobs.table.Clock().Now().Add(budget)), nil
}

// KillJob asks job id's owner to stop it (see RunJob and ExecuteWait); the end comes
// later, through a wait. An unknown id is ErrNoJob; an ended job, jobs.ErrEnded.
func (s *Session) KillJob(ctx context.Context, id jobs.ID) error {
	r, err := s.jobs.get(id)
	if err != nil {
		return err
	}
	return r.job.Kill(ctx)
}

// SaveOutput writes the full output of the ended job id to a new private file
// (kennel-output-*, 0600) in OutputDir and returns its path. It refuses a running job
// (output.ErrRunning) and output that was not retained whole (output.ErrLost: past the
// spill limit), leaving no file behind; an unknown id is ErrNoJob.
func (s *Session) SaveOutput(ctx context.Context, id jobs.ID) (string, error) {
	r, err := s.jobs.get(id)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(s.jobs.outputDir, "kennel-output-*")
	if err != nil {
		return "", fmt.Errorf("save output of job %s: %w", id, err)
	}
	name := f.Name()
	_ = f.Close()
	path, err := r.job.Capture().Save(ctx, name)
	if err != nil {
		_ = os.Remove(name)
		return "", fmt.Errorf("save output of job %s: %w", id, err)
	}
	return path, nil
}

// Kill is the job's owner: a shell job's process group is signalled by its kernel (and
// by the controller after a grace, see RunJob); a cell is interrupted, and its kernel
// killed after Options.InterruptGrace. It returns once the request is queued for the
// kernel (waiting for room until ctx ends: a wedged kernel may not read its stdin); the
// end comes later. The kernel of a job an earlier controller started is set once it was
// reattached: until then Kill is refused.
func (r *jobRun) Kill(ctx context.Context) error {
	r.mu.Lock()
	kc, pgid := r.kc, r.pgid
	r.mu.Unlock()
	if kc == nil {
		return fmt.Errorf("kill job %s: its kernel is being reattached; try again: %w", r.job.ID(), errdefs.ErrUnavailable)
	}
	var f protocol.HostFrame = protocol.JobKill{ID: r.frameID}
	if r.kind == cellJob {
		go r.killCellAfterGrace()
		f = protocol.Interrupt{ID: r.frameID}
	} else if g := kc.jobs.groups; pgid != 0 && g != nil {
		go r.hostKill(g, pgid)
	}
	if err := kc.writeFrame(ctx, f); err != nil {
		if pgid != 0 {
			r.s.log.Debug("job_kill not delivered; the controller kills the group", "job", r.frameID, "err", err)
			return nil
		}
		return fmt.Errorf("kill job %s: %w", r.job.ID(), err)
	}
	return nil
}
