package jobs

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/kennel-dev/kennel/output"
)

// Defaults of a Table.
const (
	// DefaultRetain is how many ended jobs a table keeps for reads of their output.
	DefaultRetain = 64
	// MaxObserved is the most jobs an Observation lists.
	MaxObserved = 100
)

// TableOptions configure a Table. The zero value is usable: the real clock, default
// truncation, captures without a spill directory, 64 ended jobs kept.
type TableOptions struct {
	// Clock is the time source for start and end times and for Wait. Nil: the real clock.
	Clock Clock
	// Truncation is the session's cap on job output (zero: the default, On 50 KiB and
	// 2000 lines). A Spec may set its own, which wins (output.Resolve).
	Truncation output.Truncation
	// Capture configures each job's Capture (its spill directory and sizes).
	Capture output.CaptureOptions
	// After is the id the first job's follows: ids number from After+1 (a session
	// restored after a restart continues past every id its earlier table gave).
	After ID
	// Retain is how many ended jobs stay readable (0: DefaultRetain). Live jobs are never
	// dropped; the oldest ended jobs beyond Retain are, when a job starts. Their spill
	// files stay on disk until output.Prune.
	Retain int
}

// Spec describes a job to start.
type Spec struct {
	// Command is what the job runs (a shell command, or a cell's first line). It is kept
	// up to MaxCommand scalars.
	Command string
	// PID is the job's process id when known at start, else 0 (see Job.SetPID).
	PID int
	// Owner kills the job. Required.
	Owner Owner
	// Truncation, when non-nil, overrides the table's for this job.
	Truncation *output.Truncation
	// Written is what the run wrote before it became a job (a cell whose call detached),
	// counted and kept as the job's first output.
	Written []byte
}

// Table holds the jobs of one session, in id order: it starts them with ids j1, j2, ...
// and answers observations of the live ones. Its methods are safe for concurrent use.
type Table struct {
	opts     TableOptions
	clock    Clock
	captures *output.Captures

	mu   sync.Mutex
	next ID
	jobs []*Job // ascending id
}

// NewTable returns an empty table. It refuses an invalid truncation
// (output.ErrInvalidLimits) and a capture spill directory that is not private
// (output.ErrNotPrivate).
func NewTable(opts TableOptions) (*Table, error) {
	if err := opts.Truncation.Validate(); err != nil {
		return nil, fmt.Errorf("new job table: %w", err)
	}
	captures, err := output.NewCaptures(opts.Capture)
	if err != nil {
		return nil, fmt.Errorf("new job table: %w", err)
	}
	if opts.Retain <= 0 {
		opts.Retain = DefaultRetain
	}
	return &Table{opts: opts, clock: cmp.Or[Clock](opts.Clock, realClock{}), captures: captures, next: opts.After}, nil
}

// Retains is how many bytes from offset 0 each job's capture retains (its spill limit
// with a spill directory, else its memory prefix).
func (t *Table) Retains() int64 { return t.captures.Retains() }

// Clock returns the table's clock, the one Wait uses for its jobs.
func (t *Table) Clock() Clock { return t.clock }

// Start starts tracking a job: it gets the next id, the start time from the table's
// clock, its own capture, and Spec.Written as its first output. It refuses a spec without
// an owner (ErrNoOwner), a negative pid (ErrInvalidPID) or an invalid truncation
// (output.ErrInvalidLimits), changing nothing.
func (t *Table) Start(spec Spec) (*Job, error) {
	j, err := t.newJob(spec, t.clock.Now())
	if err != nil {
		return nil, fmt.Errorf("start job: %w", err)
	}
	if len(spec.Written) > 0 {
		_, _ = j.capture.Write(spec.Written)
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	j.id = t.next
	t.jobs = append(t.jobs, j)
	t.evictLocked()
	return j, nil
}

// Adopt tracks a job an earlier table started, under its id and start time: a job that
// ran on in a kernel while the controller that started it was gone (a restarted daemon
// picks it up from its record). It gets a capture of its own, as Start's. It refuses an
// id of 0 or one the table holds or will give (ErrInvalidID: only ids at or below the
// table's TableOptions.After may be adopted), and what Start refuses, changing nothing.
func (t *Table) Adopt(id ID, started time.Time, spec Spec) (*Job, error) {
	j, err := t.newJob(spec, started)
	if err != nil {
		return nil, fmt.Errorf("adopt job %s: %w", id, err)
	}
	j.id = id
	t.mu.Lock()
	defer t.mu.Unlock()
	i, held := t.find(id)
	if id == 0 || held || id > t.opts.After {
		return nil, fmt.Errorf("adopt job %s: the table holds it or gives its id: %w", id, ErrInvalidID)
	}
	t.jobs = slices.Insert(t.jobs, i, j)
	return j, nil
}

// newJob makes the job of spec, started at started, with a capture of its own; it
// refuses what Start refuses.
func (t *Table) newJob(spec Spec, started time.Time) (*Job, error) {
	tr := output.Resolve(&t.opts.Truncation, spec.Truncation)
	switch {
	case spec.Owner == nil:
		return nil, ErrNoOwner
	case spec.PID < 0:
		return nil, fmt.Errorf("pid %d: %w", spec.PID, ErrInvalidPID)
	}
	if err := tr.Validate(); err != nil {
		return nil, err
	}
	return &Job{
		command: TakeScalars(spec.Command, MaxCommand),
		started: started,
		owner:   spec.Owner,
		clock:   t.clock,
		capture: t.captures.New(),
		done:    make(chan struct{}),
		pid:     spec.PID,
		trunc:   tr,
	}, nil
}

// find returns where job id is in t.jobs, or would be, and whether it is there. t.mu is
// held.
func (t *Table) find(id ID) (int, bool) {
	return slices.BinarySearchFunc(t.jobs, id, func(j *Job, id ID) int { return cmp.Compare(j.id, id) })
}

// evictLocked drops the oldest ended jobs beyond Retain.
func (t *Table) evictLocked() {
	ended := 0
	for _, j := range t.jobs {
		if j.ended.Load() {
			ended++
		}
	}
	if ended <= t.opts.Retain {
		return
	}
	drop := ended - t.opts.Retain
	t.jobs = slices.DeleteFunc(t.jobs, func(j *Job) bool {
		if drop > 0 && j.ended.Load() {
			drop--
			return true
		}
		return false
	})
}

// Job returns the job with id, live or among the ended jobs kept.
func (t *Table) Job(id ID) (*Job, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i, ok := t.find(id)
	if !ok {
		return nil, false
	}
	return t.jobs[i], true
}

// Live returns the jobs that have not ended, in id order.
func (t *Table) Live() []*Job {
	t.mu.Lock()
	defer t.mu.Unlock()
	var live []*Job
	for _, j := range t.jobs {
		if !j.ended.Load() {
			live = append(live, j)
		}
	}
	return live
}

// Observed is one live job as an observation shows it.
type Observed struct {
	ID ID `json:"id"`
	// PID is the job's process id, nil when unknown.
	PID *int `json:"pid"`
	// Command is at most MaxCommand scalars.
	Command string `json:"command"`
	// StartedAt is the start time in Unix milliseconds.
	StartedAt int64 `json:"started_at"`
}

// Observation is what a session shows of its background jobs.
type Observation struct {
	// LiveJobCount counts every live job, also those past the list's limit.
	LiveJobCount int `json:"live_job_count"`
	// RunningJobs lists up to MaxObserved live jobs, in id order (the oldest first).
	// Never nil.
	RunningJobs []Observed `json:"running_jobs"`
}

// Observe returns the live jobs now: their count and the first MaxObserved in id order.
func (t *Table) Observe() Observation {
	live := t.Live()
	o := Observation{LiveJobCount: len(live), RunningJobs: make([]Observed, 0, min(len(live), MaxObserved))}
	for _, j := range live[:min(len(live), MaxObserved)] {
		obs := Observed{ID: j.id, Command: j.command, StartedAt: j.started.UnixMilli()}
		if pid, ok := j.PID(); ok {
			obs.PID = &pid
		}
		o.RunningJobs = append(o.RunningJobs, obs)
	}
	return o
}
