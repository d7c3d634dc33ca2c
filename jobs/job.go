package jobs

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"github.com/kennel-dev/kennel/output"
)

// Error classes of jobs; match them with errors.Is.
var (
	// ErrEnded: an event (output, an end, a pid, a kill) for a job that has ended. The
	// event is ignored and counted in Late.
	ErrEnded = errdefs.ErrConflict.WithMessage("job already ended")
	// ErrNoOwner: a job started without an Owner, which no one could kill.
	ErrNoOwner = errdefs.ErrInvalidArgument.WithMessage("job has no owner")
	// ErrInvalidEnd: an End no process can have (see End).
	ErrInvalidEnd = errdefs.ErrInvalidArgument.WithMessage("invalid job end")
	// ErrInvalidPID: a pid that is not positive, or a second, different pid.
	ErrInvalidPID = errdefs.ErrInvalidArgument.WithMessage("invalid job pid")
)

// Owner is what runs a job and can stop it. The controller supplies it: for a shell job
// it signals the job's process group, for a cell it interrupts the cell and kills the
// kernel after a grace. Kill asks for the end; it does not report it: the owner reports
// the end later through Job.Finish, when the process has actually ended (or never, if it
// ignores the kill). Kill may block until ctx ends.
type Owner interface {
	Kill(ctx context.Context) error
}

// OwnerFunc adapts a function to Owner.
type OwnerFunc func(ctx context.Context) error

// Kill calls f(ctx).
func (f OwnerFunc) Kill(ctx context.Context) error { return f(ctx) }

// End is how a job ended. A job has exactly one.
type End struct {
	// ExitCode is the exit status (0..255) of a job that exited; nil when it was ended by
	// a signal or how it ended is unknown (its kernel is gone).
	ExitCode *int
	// Signal is the signal (1..127) that ended the job, or 0. At most one of ExitCode and
	// Signal is set.
	Signal int
	// Killed reports that the end followed a kill: a Job.Kill was requested before it
	// (the job sets this), or the owner says its own kill ended the job. Never set with
	// Interrupted.
	Killed bool
	// Interrupted reports a cell job that its interrupt ended (KeyboardInterrupt): the
	// cell stopped and the kernel that ran it lives on. ExitCode and Signal are then
	// unset, and a Kill requested before the end does not make it Killed.
	Interrupted bool
}

// Exited returns the End of a job that exited with code.
func Exited(code int) End { return End{ExitCode: &code} }

// Signaled returns the End of a job that a signal ended.
func Signaled(sig int) End { return End{Signal: sig} }

// Interrupted returns the End of a cell job its interrupt ended.
func Interrupted() End { return End{Interrupted: true} }

// validate returns an ErrInvalidEnd error for an end no process can have.
func (e End) validate() error {
	switch {
	case e.ExitCode != nil && (*e.ExitCode < 0 || *e.ExitCode > 255):
		return fmt.Errorf("exit code %d: %w", *e.ExitCode, ErrInvalidEnd)
	case e.Signal < 0 || e.Signal > 127:
		return fmt.Errorf("signal %d: %w", e.Signal, ErrInvalidEnd)
	case e.ExitCode != nil && e.Signal != 0:
		return fmt.Errorf("both exit code %d and signal %d: %w", *e.ExitCode, e.Signal, ErrInvalidEnd)
	case e.Interrupted && (e.ExitCode != nil || e.Signal != 0 || e.Killed):
		return fmt.Errorf("interrupted with an exit code, signal or kill: %w", ErrInvalidEnd)
	}
	return nil
}

// String reads "exit 0", "signal 9 (killed)", "interrupted", "unknown".
func (e End) String() string {
	s := "unknown"
	switch {
	case e.Interrupted:
		return "interrupted"
	case e.ExitCode != nil:
		s = "exit " + strconv.Itoa(*e.ExitCode)
	case e.Signal != 0:
		s = "signal " + strconv.Itoa(e.Signal)
	}
	if e.Killed {
		s += " (killed)"
	}
	return s
}

// clone copies e so that no caller shares ExitCode's int.
func (e End) clone() End {
	if e.ExitCode != nil {
		c := *e.ExitCode
		e.ExitCode = &c
	}
	return e
}

// Late counts the events a job ignored because they came after its end.
type Late struct {
	Outputs int64 // output chunks
	Bytes   int64 // their bytes
	Ends    int64 // second ends
	Other   int64 // pids and kills
}

// Job is one piece of work that runs long: a shell command, or a cell whose call
// outlived its blocking budget. It has an id, a command, a start time, an optional pid,
// one output and one end. The output is its Capture, for paged reads and saves, and
// nothing else: a report of it under the job's Truncation (Snapshot, Wait) is built from
// the capture when asked for and kept by no one but its caller, so what a job holds in
// memory for its life is the capture's head and tail, whatever its output and
// truncation. Its methods are safe for concurrent use. Jobs are made by Table.Start.
type Job struct {
	id      ID
	command string
	started time.Time
	owner   Owner
	clock   Clock
	capture *output.Capture
	trunc   output.Truncation // bounds the job's reports; valid
	done    chan struct{}
	ended   atomic.Bool // set with the end, right before done is closed

	mu      sync.Mutex
	pid     int
	end     *End
	endAt   time.Time
	killing int  // Kill calls in flight
	killed  bool // a Kill call succeeded
	late    Late
}

// ID returns the job's id.
func (j *Job) ID() ID { return j.id }

// Command returns the job's command, at most MaxCommand scalars.
func (j *Job) Command() string { return j.command }

// Started returns when the job started, by its table's clock.
func (j *Job) Started() time.Time { return j.started }

// Capture returns the job's retained output, for paged reads and saves. The job is its
// only writer; it is closed when the job ends.
func (j *Job) Capture() *output.Capture { return j.capture }

// Done returns a channel closed when the job has ended.
func (j *Job) Done() <-chan struct{} { return j.done }

// PID returns the job's process id and true, or 0 and false when it is not known (a cell,
// a remote job, or a shell job whose start frame has not arrived).
func (j *Job) PID() (int, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.pid, j.pid != 0
}

// SetPID records the job's process id once it is known. It refuses a pid that is not
// positive, or one different from a pid already recorded (ErrInvalidPID); after the end
// it is ignored (ErrEnded).
func (j *Job) SetPID(pid int) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch {
	case j.end != nil:
		j.late.Other++
		return fmt.Errorf("set pid of job %s: %w", j.id, ErrEnded)
	case pid <= 0 || j.pid != 0 && j.pid != pid:
		return fmt.Errorf("set pid %d of job %s: %w", pid, j.id, ErrInvalidPID)
	}
	j.pid = pid
	return nil
}

// Output appends the bytes the job wrote, exactly as read from its pipe, to its capture.
// After the end it keeps nothing and returns an ErrEnded error (counted in Late).
func (j *Job) Output(p []byte) error {
	return j.output(int64(len(p)), func() error {
		_, err := j.capture.Write(p)
		return err
	})
}

// Lost counts n bytes the job wrote that can no longer be read (output.Capture.Skip):
// output an earlier controller consumed and whose file gave back its disk. After the end
// it is ignored (ErrEnded, counted in Late as Output's bytes are).
func (j *Job) Lost(n int64) error {
	return j.output(n, func() error { return j.capture.Skip(n) })
}

// output applies write, n bytes of output, to the capture while the job runs; after the
// end it counts them in Late instead.
func (j *Job) output(n int64, write func() error) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.end != nil {
		j.late.Outputs++
		j.late.Bytes += n
		return fmt.Errorf("output of job %s: %w", j.id, ErrEnded)
	}
	if err := write(); err != nil {
		return fmt.Errorf("output of job %s: %w", j.id, err)
	}
	return nil
}

// Finish records the job's one end, as its owner reports it. The first valid end wins:
// it closes the capture and Done, and Killed is set when a Kill came before it (unless
// the end is Interrupted: the kill stopped the cell, not its kernel). A later
// end is ignored (ErrEnded, counted in Late); an invalid end is refused (ErrInvalidEnd)
// and changes nothing.
func (j *Job) Finish(end End) error {
	if err := end.validate(); err != nil {
		return fmt.Errorf("finish job %s: %w", j.id, err)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.end != nil {
		j.late.Ends++
		return fmt.Errorf("finish job %s: %w", j.id, ErrEnded)
	}
	e := end.clone()
	e.Killed = !e.Interrupted && (e.Killed || j.killed || j.killing > 0)
	j.end, j.endAt = &e, j.clock.Now()
	_ = j.capture.Close() // a close failure is recorded in the capture's stat
	j.ended.Store(true)
	close(j.done)
	return nil
}

// End returns the job's end and true once it has ended.
func (j *Job) End() (End, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.end == nil {
		return End{}, false
	}
	return j.end.clone(), true
}

// Kill asks the job's owner to stop it. It does not end the job: the owner reports the
// end through Finish, which then marks it Killed. Killing an ended job does nothing and
// returns an ErrEnded error. The owner's error is returned wrapped.
func (j *Job) Kill(ctx context.Context) error {
	j.mu.Lock()
	if j.end != nil {
		j.late.Other++
		j.mu.Unlock()
		return fmt.Errorf("kill job %s: %w", j.id, ErrEnded)
	}
	j.killing++
	j.mu.Unlock()

	err := j.owner.Kill(ctx)

	j.mu.Lock()
	defer j.mu.Unlock()
	j.killing--
	if err != nil {
		return fmt.Errorf("kill job %s: %w", j.id, err)
	}
	j.killed = true
	return nil
}

// Late returns the events ignored because they came after the end.
func (j *Job) Late() Late {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.late
}

// soFar is the job's output so far (all of it once the job has ended) bounded by its
// truncation, built from its capture for the caller alone; Where names the job, and
// Retained the ranges its output reads can still get when not all of it was retained.
// It reads the capture (and maybe its spill file): the caller must not hold j.mu, which
// the job's writer needs.
func (j *Job) soFar() output.Result {
	r, _ := j.capture.Bound(j.trunc) // j.trunc is valid: Table.Start checked it
	if r.Truncated() {
		r.Where = "job " + j.id.String()
	}
	return r
}

// Snapshot is a job's state at one moment.
type Snapshot struct {
	ID      ID
	Command string
	PID     int // 0: unknown
	Started time.Time
	// End is the job's end, or nil while it runs.
	End *End
	// Output is the output so far, bounded by the job's truncation: made for this
	// snapshot from the job's capture (under Off, up to the capture's spill limit).
	Output output.Result
}

// Snapshot returns the job's state now. The output is read after the end: once End is
// set, Output is the job's whole output (as far as it was retained).
func (j *Job) Snapshot() Snapshot {
	j.mu.Lock()
	s := Snapshot{ID: j.id, Command: j.command, PID: j.pid, Started: j.started}
	if j.end != nil {
		e := j.end.clone()
		s.End = &e
	}
	j.mu.Unlock()
	s.Output = j.soFar()
	return s
}
