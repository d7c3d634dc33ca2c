package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/kennel-dev/kennel/controller/gate"
	"github.com/kennel-dev/kennel/internal/procfs"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/output"
	"github.com/kennel-dev/kennel/protocol"
	"github.com/segmentio/asm/base64"
)

// Errors of jobs a caller decides on with errors.Is.
var (
	// ErrNoJob: the session has no job with that id (never started, or an ended job the
	// table no longer keeps).
	ErrNoJob = errors.New("no such job")
	// ErrInvalidCommand: a shell command /bin/sh -c cannot be given: not valid UTF-8, with
	// a NUL byte, or longer than MaxCommandBytes. Nothing was started.
	ErrInvalidCommand = errors.New("invalid job command")
	// ErrEndedByController: the controller ended a killed job itself because its kernel did
	// not report the end within twice Options.JobKillGrace of the kill (a wedged kernel);
	// the job's process group had been killed by the controller and was empty.
	ErrEndedByController = errors.New("job ended by the controller")
)

// MaxCommandBytes is the longest shell command RunJob accepts: Linux refuses to exec a
// single argument longer than 128 KiB (MAX_ARG_STRLEN), and the command is one argument of
// /bin/sh -c.
const MaxCommandBytes = 128<<10 - 1

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

// DefaultStateDir is the state directory of a session whose Options.StateDir is empty:
// kennel-<euid> under os.TempDir().
func DefaultStateDir() string {
	return filepath.Join(os.TempDir(), "kennel-"+strconv.Itoa(os.Geteuid()))
}

// jobSet is a session's jobs: the table, where their spill files go, and the controller's
// record of each job the table still holds.
type jobSet struct {
	table     *jobs.Table
	outputDir string     // SaveOutput's files, shared by the sessions of one state directory
	spillDir  string     // this session's spill files and FIFOs, removed with the session
	fifoPool  *sync.Pool // read buffers of jobs' FIFOs (see jobFIFOs)

	mu   sync.Mutex
	runs map[jobs.ID]*jobRun
	// pruneAt is the size of runs at which add forgets the runs of jobs the table
	// dropped; it doubles past what a prune keeps, so add costs O(1) amortized.
	pruneAt int
}

// minRunsPrune is the smallest pruneAt: twice the ended jobs a table keeps.
const minRunsPrune = 2 * jobs.DefaultRetain

// initJobs prepares the session's private output directories, prunes old saved output
// and abandoned spill directories (output.SpillKeep) and makes the job table. It runs
// before the first kernel.
func (s *Session) initJobs(ctx context.Context) error {
	if err := s.opts.Truncation.Validate(); err != nil {
		return fmt.Errorf("start session: %w", err)
	}
	if s.opts.JobKillGrace == 0 {
		s.opts.JobKillGrace = 2 * time.Second
	}
	state := s.opts.StateDir
	if state == "" {
		state = DefaultStateDir()
	}
	if err := output.PrepareDir(state); err != nil {
		return fmt.Errorf("start session: state dir: %w", err)
	}
	dir := filepath.Join(state, "output")
	if err := output.PrepareDir(dir); err != nil {
		return fmt.Errorf("start session: %w", err)
	}
	if n, err := output.Prune(ctx, dir, output.SpillKeep); err != nil {
		s.log.Warn("pruning old job output", "dir", dir, "removed", n, "err", err)
	} else if n > 0 {
		s.log.Debug("pruned old job output", "dir", dir, "removed", n)
	}
	if n, err := pruneSpillDirs(dir, output.SpillKeep); err != nil {
		s.log.Warn("pruning abandoned spill directories", "dir", dir, "removed", n, "err", err)
	}
	spill := filepath.Join(dir, spillDirPrefix+s.id)
	if err := output.PrepareDir(spill); err != nil {
		return fmt.Errorf("start session: %w", err)
	}
	table, err := jobs.NewTable(jobs.TableOptions{
		Truncation: s.opts.Truncation,
		Capture:    output.CaptureOptions{SpillDir: spill},
	})
	if err != nil {
		_ = os.RemoveAll(spill)
		return fmt.Errorf("start session: %w", err)
	}
	s.jobs = jobSet{table: table, outputDir: dir, spillDir: spill, fifoPool: newFIFOPool(), runs: make(map[jobs.ID]*jobRun), pruneAt: minRunsPrune}
	return nil
}

// Jobs returns the session's job table: its live jobs (Observe lists at most
// jobs.MaxObserved, in id order) and the ended jobs it keeps for reads of their output.
func (s *Session) Jobs() *jobs.Table { return s.jobs.table }

// OutputDir is the private directory where SaveOutput writes a job's full output; files
// there older than output.SpillKeep are pruned when a session starts. Spill files (the
// retained output of running and ended jobs) and job FIFOs live in a directory of the
// session's own inside it, removed when the session ends.
func (s *Session) OutputDir() string { return s.jobs.outputDir }

// SpillDir is the session's own directory inside OutputDir: its jobs' spill files and
// FIFOs. Close removes it once the session's kernels have ended.
func (s *Session) SpillDir() string { return s.jobs.spillDir }

// add records r. Once runs reaches pruneAt it forgets the runs of jobs the table dropped,
// so runs stays below twice what the table held at that prune (or minRunsPrune).
func (js *jobSet) add(r *jobRun) {
	js.mu.Lock()
	defer js.mu.Unlock()
	js.runs[r.job.ID()] = r
	if len(js.runs) < js.pruneAt {
		return
	}
	for id := range js.runs {
		if _, ok := js.table.Job(id); !ok {
			delete(js.runs, id)
		}
	}
	js.pruneAt = max(2*len(js.runs), minRunsPrune)
}

// get returns the run of job id while the table holds the job; a run the table dropped
// and add did not prune yet is forgotten here, so get answers as the table does.
func (js *jobSet) get(id jobs.ID) (*jobRun, error) {
	js.mu.Lock()
	defer js.mu.Unlock()
	r, ok := js.runs[id]
	if ok {
		if _, held := js.table.Job(id); !held {
			delete(js.runs, id)
			ok = false
		}
	}
	if !ok {
		return nil, fmt.Errorf("job %s: %w", id, ErrNoJob)
	}
	return r, nil
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
	kc      *kernelConn
	kind    jobKind
	frameID string    // the job id (shell jobs) or the cell id (cell jobs)
	job     *jobs.Job // set right after Table.Start, before any frame can name the job
	cell    *cellRun  // cell jobs
	fifos   *jobFIFOs // shell jobs of a SameFS kernel: where their output comes; nil for frames

	mu     sync.Mutex
	pgid   int         // shell jobs of a HostPIDs kernel: the group verified at job_start
	cause  error       // why the job ended without its own end
	result *CellResult // cell jobs: the result, set before the job's end
}

// endWithout ends the job with end, which is not its own (an unknown end when its kernel
// ended), recording cause as the reason when this end is the one that takes. r.mu is
// held across Finish, so a waiter woken by the end reads the cause that goes with it.
func (r *jobRun) endWithout(cause error, end jobs.End) {
	if r.fifos != nil {
		r.fifos.stop()
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

// RunJob starts command as a shell job inside the sandbox (`/bin/sh -c command`, in its
// own process group there) and returns it at once. Its stdout and stderr arrive as bytes,
// never decoded, in the job's Capture, bounded for reports by opts.Truncation or the
// session's. The job ends exactly once: with the kernel's job_end, or with an unknown end
// when its kernel ends first (JobWait.Err then says why).
//
// For a transport whose kernel shares the host's file system (Capabilities.SameFS) the
// job's stdout and stderr are FIFOs in OutputDir that the controller reads itself (the
// kernel falls back to forwarding frames if it cannot open them); the kernel's job_end
// then takes effect once both FIFOs reached end of file, or after Options.JobKillGrace
// when a process that outlived the shell still holds one (the bytes read until then are
// the job's output).
//
// Job.Kill goes through the job's owner: the kernel signals the job's process group
// (SIGTERM); for a kernel whose pids are host pids (transports.Info.HostPIDs) the
// controller also kills the group with SIGKILL if it is still there after
// Options.JobKillGrace, and ends the job itself (ErrEndedByController) if the kernel has
// not reported the end after as long again, so a job of a wedged kernel still dies.
//
// An invalid command (ErrInvalidCommand) or truncation (output.ErrInvalidLimits) is
// refused, starting nothing.
func (s *Session) RunJob(ctx context.Context, command string, opts JobOptions) (*jobs.Job, error) {
	return s.runJob(ctx, command, opts, nil)
}

// runJob is RunJob; edit, when not nil, may change the job_run frame before it is sent
// (tests: a kernel that cannot open its FIFOs).
func (s *Session) runJob(ctx context.Context, command string, opts JobOptions, edit func(*protocol.JobRun)) (*jobs.Job, error) {
	if err := checkCommand(command); err != nil {
		return nil, err
	}
	if opts.Truncation != nil {
		if err := opts.Truncation.Validate(); err != nil {
			return nil, fmt.Errorf("run job: %w", err)
		}
	}
	kc, err := s.kernel(ctx)
	if err != nil {
		return nil, err
	}
	r := &jobRun{s: s, kc: kc, kind: shellJob}
	job, err := s.jobs.table.Start(jobs.Spec{Command: command, Owner: r, Truncation: opts.Truncation})
	if err != nil {
		return nil, fmt.Errorf("run job: %w", err)
	}
	r.job, r.frameID = job, job.ID().String()
	frame := protocol.JobRun{ID: r.frameID, Command: command}
	if s.opts.Transport.Capabilities().SameFS {
		f, err := newJobFIFOs(s.jobs.spillDir, job, s.jobs.fifoPool)
		if err != nil {
			s.log.Warn("job output goes through frames", "job", job.ID(), "err", err)
		} else {
			r.fifos = f
			frame.Stdout, frame.Stderr = f.paths[0], f.paths[1]
		}
	}
	if edit != nil {
		edit(&frame)
	}
	s.jobs.add(r)

	kc.mu.Lock()
	if kc.err != nil {
		err := kc.err
		kc.mu.Unlock()
		r.endWithout(err, jobs.End{})
		return nil, fmt.Errorf("run job %s: %w", job.ID(), err)
	}
	kc.jobs.runs[r.frameID] = r
	kc.mu.Unlock()

	if err := kc.writeFrame(ctx, frame); err != nil {
		kc.mu.Lock()
		delete(kc.jobs.runs, r.frameID)
		kc.mu.Unlock()
		r.endWithout(err, jobs.End{})
		return nil, fmt.Errorf("run job %s: %w", job.ID(), err)
	}
	return job, nil
}

// checkCommand refuses a command /bin/sh -c cannot be given.
func checkCommand(command string) error {
	switch {
	case len(command) > MaxCommandBytes:
		return fmt.Errorf("run job: command of %d bytes (at most %d): %w", len(command), MaxCommandBytes, ErrInvalidCommand)
	case !utf8.ValidString(command):
		return fmt.Errorf("run job: command is not valid UTF-8: %w", ErrInvalidCommand)
	case strings.IndexByte(command, 0) >= 0:
		return fmt.Errorf("run job: command has a NUL byte: %w", ErrInvalidCommand)
	}
	return nil
}

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
	deadline := s.jobs.table.Clock().Now().Add(budget)
	kc, err := s.kernel(ctx)
	if err != nil {
		return JobWait{}, err
	}
	cellID := s.nextID("c")
	r := &jobRun{s: s, kc: kc, kind: cellJob, frameID: cellID}
	job, err := s.jobs.table.Start(jobs.Spec{Command: firstLine(code), Owner: r})
	if err != nil {
		return JobWait{}, fmt.Errorf("cell %s: %w", cellID, err)
	}
	r.job = job
	r.cell = &cellRun{sink: cellJobSink{job: job, next: sink}, done: make(chan struct{})}
	r.cell.ended = r.cellEnded
	s.jobs.add(r)

	kc.mu.Lock()
	if kc.err != nil {
		err := kc.err
		kc.mu.Unlock()
		r.endWithout(err, jobs.End{})
		return JobWait{}, fmt.Errorf("cell %s: %w", cellID, err)
	}
	kc.cells[cellID] = r.cell
	kc.mu.Unlock()

	if err := kc.writeFrame(ctx, protocol.Execute{ID: cellID, Code: code}); err != nil {
		kc.forgetCell(cellID)
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
	if c.err != nil {
		r.endWithout(c.err, jobs.End{})
		return
	}
	res := &CellResult{ID: r.frameID, Status: c.res.Status, Result: c.res.Result, Error: c.res.Error}
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
// killed after Options.InterruptGrace. It returns once the request is sent (or ctx ends);
// the end comes later.
func (r *jobRun) Kill(ctx context.Context) error {
	if r.kind == cellJob {
		go r.killCellAfterGrace()
		return r.send(ctx, protocol.Interrupt{ID: r.frameID})
	}
	r.mu.Lock()
	pgid := r.pgid
	r.mu.Unlock()
	if pgid != 0 && r.kc.k.Info().HostPIDs {
		go r.hostKill(pgid)
	}
	err := r.send(ctx, protocol.JobKill{ID: r.frameID})
	if err != nil && pgid != 0 {
		r.s.log.Debug("job_kill not delivered; the controller kills the group", "job", r.frameID, "err", err)
		return nil
	}
	return err
}

// send queues f for the job's kernel, giving up waiting for room when ctx ends: a wedged
// kernel may not read its stdin.
func (r *jobRun) send(ctx context.Context, f protocol.HostFrame) error {
	if err := r.kc.writeFrame(ctx, f); err != nil {
		return fmt.Errorf("kill job %s: %w", r.job.ID(), err)
	}
	return nil
}

// killCellAfterGrace kills the cell's kernel if the cell has not ended within the
// interrupt grace (the reference's S2 jobs 3).
func (r *jobRun) killCellAfterGrace() {
	grace := r.s.opts.InterruptGrace
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-r.cell.done:
		return
	case <-t.C:
	}
	cause := fmt.Errorf("cell %s (job %s) did not stop within %v of its interrupt", r.frameID, r.job.ID(), grace)
	r.s.log.Warn("killed cell job ignored its interrupt; killing its kernel", "job", r.job.ID(), "cell", r.frameID)
	r.kc.fail(fmt.Errorf("%w: %w", ErrKernelExited, cause))
	_ = r.kc.kill(context.Background())
}

// hostKill kills a killed shell job's process group with SIGKILL when it is still there
// after the grace, and ends the job itself when the kernel has not reported the end after
// as long again and the group is empty.
func (r *jobRun) hostKill(pgid int) {
	grace := r.s.opts.JobKillGrace
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-r.job.Done():
		return
	case <-t.C:
	}
	end := jobs.End{Killed: true}
	if groupAlive(pgid) {
		r.s.log.Warn("killed job still running after the grace; killing its process group", "job", r.frameID, "pgid", pgid, "grace", grace)
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err == nil {
			end = jobs.End{Signal: int(syscall.SIGKILL), Killed: true}
		}
	}
	t.Reset(grace)
	select {
	case <-r.job.Done():
		return
	case <-t.C:
	}
	if groupAlive(pgid) {
		return // uninterruptible sleep; the kernel's end (or its kernel's) will come
	}
	r.s.log.Warn("kernel did not report the end of a killed job; ending it", "job", r.frameID)
	r.endWithout(fmt.Errorf("job %s: the kernel did not report its end within %v of its kill: %w", r.job.ID(), 2*grace, ErrEndedByController), end)
}

// kernelJobs are the shell jobs one kernel generation runs, by frame id (kc.mu guards
// runs); buf is the reader goroutine's decoding buffer.
type kernelJobs struct {
	runs map[string]*jobRun
	buf  []byte
}

// job returns the running shell job the kernel names id, or nil.
func (kc *kernelConn) job(id string, take bool) *jobRun {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	r := kc.jobs.runs[id]
	if take {
		delete(kc.jobs.runs, id)
	}
	return r
}

// endJobs ends the jobs of a kernel generation that ended with err.
func endJobs(runs map[string]*jobRun, err error) {
	for _, r := range runs {
		r.endWithout(err, jobs.End{})
	}
}

// onJobFrame routes a job_start, job_output or job_end frame to its job. It runs on the
// reader goroutine and never blocks on a caller. Frames naming no running job are
// dropped; a job_output in the stub's own layout is decoded without encoding/json.
func (kc *kernelConn) onJobFrame(f gate.Frame) {
	log := kc.s.log
	switch f.Event {
	case protocol.EventJobOutput:
		r := kc.job(f.ID, false)
		if r == nil {
			log.Debug("output of no running job dropped", "id", f.ID)
			return
		}
		data, ok := decodeJobOutput(f.Line, f.ID, &kc.jobs.buf)
		if !ok {
			e, err := protocol.DecodeJobOutput(f.Line)
			if err != nil {
				log.Warn("undecodable job output dropped", "id", f.ID, "err", err)
				return
			}
			data = e.Data
		}
		_ = r.job.Output(data) // after the end: ignored and counted by the job
		if cap(kc.jobs.buf) > 4<<20 {
			kc.jobs.buf = nil
		}
	case protocol.EventJobStart:
		e, err := protocol.DecodeJobStart(f.Line)
		if err != nil {
			log.Warn("undecodable job_start dropped", "id", f.ID, "err", err)
			return
		}
		r := kc.job(e.ID, false)
		if r == nil {
			log.Warn("job_start of no running job dropped", "id", e.ID)
			return
		}
		if r.fifos != nil {
			r.fifos.release() // the kernel has opened its ends, or never will
		}
		if err := r.job.SetPID(e.PID); err != nil {
			log.Warn("job_start refused", "job", e.ID, "err", err)
			return
		}
		if info := kc.k.Info(); info.HostPIDs {
			if err := checkJobGroup(e.PID, e.PGID, info.PID); err != nil {
				level := slog.LevelWarn
				if errors.Is(err, fs.ErrNotExist) {
					level = slog.LevelDebug // it has exited already
				}
				log.Log(context.Background(), level, "job's process group not verified; only its kernel can kill it", "job", e.ID, "err", err)
				return
			}
			r.mu.Lock()
			r.pgid = e.PGID
			r.mu.Unlock()
		}
	case protocol.EventJobEnd:
		e, err := protocol.DecodeJobEnd(f.Line)
		if err != nil {
			log.Warn("undecodable job_end dropped", "id", f.ID, "err", err)
			return
		}
		r := kc.job(e.ID, true)
		if r == nil {
			log.Debug("job_end of no running job dropped", "id", e.ID)
			return
		}
		end, err := jobEnd(e)
		if err != nil {
			log.Warn("kernel reported an impossible job end", "job", e.ID, "err", err)
			r.endWithout(fmt.Errorf("%w: %w", ErrKernelExited, err), jobs.End{})
			return
		}
		if r.fifos == nil {
			r.finish(end)
			return
		}
		go func() {
			r.fifos.drain(kc.s.opts.JobKillGrace)
			r.finish(end)
		}()
	}
}

// finish ends the job with its own end (the kernel's job_end, or the cell's done).
func (r *jobRun) finish(end jobs.End) {
	if err := r.job.Finish(end); err != nil && !errors.Is(err, jobs.ErrEnded) {
		r.s.log.Warn("job end refused", "job", r.job.ID(), "frame", r.frameID, "err", err)
	}
}

// jobEnd turns a job_end frame into the job's end: an exit code 0..255, a signal, or
// unknown (both null: the job could not start). Any other exit code is an
// jobs.ErrInvalidEnd error.
func jobEnd(e protocol.JobEnd) (jobs.End, error) {
	switch {
	case e.ExitCode != nil && (*e.ExitCode < 0 || *e.ExitCode > 255):
		return jobs.End{}, fmt.Errorf("job %s: exit code %d: %w", e.ID, *e.ExitCode, jobs.ErrInvalidEnd)
	case e.ExitCode != nil:
		return jobs.Exited(*e.ExitCode), nil
	case e.Signal != nil:
		return jobs.Signaled(*e.Signal), nil
	}
	return jobs.End{}, nil
}

// The stub's job_output layout: {"event":"job_output","id":ID,"name":NAME,"data":B64}.
var (
	jobOutputHead = []byte(`{"event":"job_output","id":"`)
	jobOutputName = []byte(`","name":"`)
	jobOutputData = []byte(`","data":"`)
	jobOutputTail = []byte(`"}`)
)

// decodeJobOutput decodes a gated job_output line in exactly the stub's layout, with the
// data as standard padded base64, into *buf (grown as needed), and returns the bytes.
// ok is false for any other line, which the caller decodes with protocol.DecodeJobOutput;
// when ok is true both decoders give the same bytes. The layout leaves no room for
// escapes, other keys or whitespace: id must need no JSON escape, the name is stdout or
// stderr, and a base64 body holds no quote or backslash (nor CR or LF, which base64
// decoders skip but JSON refuses raw in a string). The base64 decoder is
// github.com/segmentio/asm/base64 (AVX2), strict like the protocol package's; a fuzz test
// holds the two decoders to the same bytes.
func decodeJobOutput(line []byte, id string, buf *[]byte) ([]byte, bool) {
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x20 || c == '"' || c == '\\' {
			return nil, false
		}
	}
	rest, ok := bytes.CutPrefix(line, jobOutputHead)
	if !ok || !bytes.HasPrefix(rest, []byte(id)) {
		return nil, false
	}
	if rest, ok = bytes.CutPrefix(rest[len(id):], jobOutputName); !ok {
		return nil, false
	}
	if r, ok := bytes.CutPrefix(rest, []byte(protocol.StreamStdout)); ok {
		rest = r
	} else if r, ok := bytes.CutPrefix(rest, []byte(protocol.StreamStderr)); ok {
		rest = r
	} else {
		return nil, false
	}
	if rest, ok = bytes.CutPrefix(rest, jobOutputData); !ok {
		return nil, false
	}
	body, ok := bytes.CutSuffix(rest, jobOutputTail)
	// Base64 decoders skip CR and LF, which a JSON string cannot hold raw.
	if !ok || bytes.IndexByte(body, '\r') >= 0 || bytes.IndexByte(body, '\n') >= 0 {
		return nil, false
	}
	enc := base64.StdEncoding.Strict()
	if n := enc.DecodedLen(len(body)); cap(*buf) < n {
		*buf = make([]byte, n)
	}
	n, err := enc.Decode((*buf)[:cap(*buf)], body)
	if err != nil {
		return nil, false
	}
	return (*buf)[:n], true
}

// checkJobGroup verifies a job_start's pid and pgid before the controller will ever
// signal that group: the job's process must lead its own group (pid == pgid, as the stub
// starts it), and be a child of the kernel's process. A kernel cannot so name a group it
// did not start. Race: once every process of the group is gone, a new process may take
// the same id (after the pid space wraps); the controller signals a group only while its
// job has not ended and a live member is found just before (see groupAlive).
func checkJobGroup(pid, pgid, kernelPID int) error {
	if pid != pgid || pgid <= 1 {
		return fmt.Errorf("pid %d, pgid %d: the job does not lead its own group", pid, pgid)
	}
	st, err := procfs.Read(pid)
	if err != nil {
		return fmt.Errorf("job pid %d: %w", pid, err)
	}
	if st.PGRP != pgid || st.PPID != kernelPID {
		return fmt.Errorf("job pid %d has group %d and parent %d, want %d and the kernel %d", pid, st.PGRP, st.PPID, pgid, kernelPID)
	}
	return nil
}

// groupAlive reports whether process group pgid has a member that is not a zombie.
func groupAlive(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	all, err := procfs.All()
	if err != nil {
		return true // cannot tell: assume it is
	}
	for _, st := range all {
		if st.PGRP == pgid && !st.Zombie() && st.State != 'X' {
			return true
		}
	}
	return false
}

// OutputFollower writes a job's output to a writer while the job runs, within the window
// the job's truncation will report: every byte under Off, the whole lines of the head
// window under On with Head, nothing under Tail (a tail window is known only at the end).
// Poll writes what arrived since the last call; Finish writes the rest of the settled
// window, so that the writer receives exactly the Kept bytes of the job's report. It
// reads the job's capture by pages and never holds up the job. Not safe for concurrent
// use.
type OutputFollower struct {
	c       *output.Capture
	off     bool
	lim     output.Limits
	w       io.Writer
	read    int64  // capture bytes read
	written int64  // bytes written to w
	lines   int64  // whole lines written (head)
	pending []byte // head: the start of a line not yet written
	stopped bool   // nothing more is written before Finish
}

// NewOutputFollower returns a follower of job's output under t, the truncation the job
// runs with (output.Resolve of the session's and the job's own).
func NewOutputFollower(job *jobs.Job, t output.Truncation, w io.Writer) *OutputFollower {
	f := &OutputFollower{c: job.Capture(), off: t.IsOff(), lim: t.Limits(), w: w}
	f.stopped = !f.off && f.lim.Keep == output.Tail
	return f
}

// Poll writes the output that arrived since the last call, as far as the window allows.
// Output that was not retained (a follower that fell more than the spill limit behind)
// stops the writing until Finish; an error is the writer's.
func (f *OutputFollower) Poll() error {
	for !f.stopped {
		p, err := f.c.ReadPage(f.read, output.MaxPage)
		if err != nil {
			f.stopped = true // lost or unreadable: Finish writes the rest from the report
			return nil
		}
		f.read += int64(len(p.Data))
		if err := f.take(p.Data); err != nil {
			return err
		}
		if len(p.Data) < output.MaxPage {
			return nil
		}
	}
	return nil
}

// take writes what of data the window allows.
func (f *OutputFollower) take(data []byte) error {
	if f.off {
		return f.write(data)
	}
	f.pending = append(f.pending, data...)
	for {
		i := bytes.IndexByte(f.pending, '\n')
		if i < 0 {
			if int64(len(f.pending)) > f.lim.Bytes-f.written {
				f.stopped, f.pending = true, nil
			}
			return nil
		}
		line := f.pending[:i+1]
		if f.written+int64(len(line)) > f.lim.Bytes || f.lines+1 > f.lim.Lines {
			f.stopped, f.pending = true, nil
			return nil
		}
		if err := f.write(line); err != nil {
			return err
		}
		f.lines++
		f.pending = f.pending[i+1:]
	}
}

func (f *OutputFollower) write(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	n, err := f.w.Write(p)
	f.written += int64(n)
	if err != nil {
		return fmt.Errorf("follow job output: %w", err)
	}
	return nil
}

// Finish writes the rest of r, the job's settled report (jobs.Settled.Output): the
// writer then holds exactly r.Kept, or under Off at least r.Kept (the follower may have
// streamed more than the capture retains: every byte it wrote is the job's, in order).
// It reads nothing more from the capture.
func (f *OutputFollower) Finish(r output.Result) error {
	f.stopped, f.pending = true, nil
	if f.written > int64(len(r.Kept)) {
		if f.off {
			return nil
		}
		return fmt.Errorf("follow job output: wrote %d bytes, the report keeps %d", f.written, len(r.Kept))
	}
	return f.write(r.Kept[f.written:])
}
