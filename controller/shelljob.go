package controller

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/protocol"
	"github.com/kennel-dev/kennel/transports"
)

// MaxCommandBytes is the longest shell command RunJob accepts: Linux refuses to exec a
// single argument longer than 128 KiB (MAX_ARG_STRLEN), and the command is one argument of
// /bin/sh -c.
const MaxCommandBytes = 128<<10 - 1

// RunJob starts command as a shell job inside the sandbox (`/bin/sh -c command`, in its
// own process group there) and returns it once the kernel has started it (its
// job_start; at most 10 s, or until ctx ends), so that a job RunJob returned is one the
// kernel has, whatever happens to this process after. Its stdout and stderr arrive as bytes,
// never decoded, in the job's Capture, bounded for reports by opts.Truncation or the
// session's. The job ends exactly once: with the kernel's job_end, or with an unknown end
// when its kernel ends first (JobWait.Err then says why).
//
// Where the kernel can write files whose bytes reach the controller beside the frames
// (transports.JobOutputs says where: a kernel that shares the host's file system,
// Capabilities.SameFS; a container given the session's job output directory,
// Info.JobOutDir; a transport that carries the bytes itself, transports.JobOutputs) the
// job's stdout and stderr are such files, regular files the job appends to and the
// controller tails, and their bytes never pass through the kernel's Python (the kernel
// falls back to forwarding frames if it cannot open them); the kernel's job_end takes
// effect once both files were read to their end (for bytes a transport carries, at most
// JobKillGrace after the last byte arrived, at most a minute). A file needs no reader, so
// the job runs on when the controller dies: Options.OnJob records it first, and a later
// controller picks it up (Options.ResumeJobs) and reads its files again.
//
// Job.Kill goes through the job's owner: the kernel signals the job's process group
// (SIGTERM); for a kernel that lets the controller signal its jobs' groups on the host
// (transports.HostGroups: a local kernel) the controller, once the group was verified at
// job_start (HostGroups.VerifyGroup), also kills it with SIGKILL if it is still there
// after Options.JobKillGrace, and ends the job itself (ErrEndedByController) if the kernel has
// not reported the end after as long again, so a job of a wedged kernel still dies.
//
// An invalid command (ErrInvalidCommand) or truncation (output.ErrInvalidLimits) is
// refused, starting nothing.
func (s *Session) RunJob(ctx context.Context, command string, opts JobOptions) (*jobs.Job, error) {
	job, err := s.runJob(ctx, command, opts, nil)
	if err == nil {
		s.watchJob(job) // its end is an event (Subscribe)
	}
	return job, err
}

// runJob is RunJob; edit, when not nil, may change the job_run frame before it is sent
// (tests: a kernel that cannot open its files).
func (s *Session) runJob(ctx context.Context, command string, opts JobOptions, edit func(*protocol.JobRun)) (*jobs.Job, error) {
	if err := checkCommand(command); err != nil {
		return nil, err
	}
	if opts.Truncation != nil {
		if err := opts.Truncation.Validate(); err != nil {
			return nil, fmt.Errorf("run job: %w", err)
		}
	}
	kc, err := s.kernel(ctx, false)
	if err != nil {
		return nil, err
	}
	r := &jobRun{s: s, kc: kc, kind: shellJob, started: make(chan struct{})}
	job, err := s.jobs.table.Start(jobs.Spec{Command: command, Owner: r, Truncation: opts.Truncation})
	if err != nil {
		return nil, fmt.Errorf("run job: %w", err)
	}
	r.job, r.frameID = job, job.ID().String()
	frame := protocol.JobRun{ID: r.frameID, Command: command}
	var host [2]string
	if streams, paths, way := s.openJobStreams(ctx, kc, job); streams != nil {
		r.streams, r.way, r.paths = streams, way, paths
		frame.Stdout, frame.Stderr = paths[0], paths[1]
		if f, ok := streams.(*jobFiles); ok {
			host = f.paths
		}
	}
	if edit != nil {
		edit(&frame)
	}
	s.jobs.add(r)
	fail := func(err error) (*jobs.Job, error) {
		r.endWithout(err, jobs.End{})
		return nil, fmt.Errorf("run job %s: %w", job.ID(), err)
	}
	if s.opts.OnJob != nil {
		if err := s.opts.OnJob(r.record(host)); err != nil {
			if r.streams != nil {
				r.streams.drain(s.opts.JobKillGrace)
				r.streams.remove() // nothing was written, and no record holds them
			}
			return fail(err)
		}
	}

	if err := track(kc, &kc.jobs.runs, r.frameID, r); err != nil {
		return fail(err)
	}
	if err := kc.writeFrame(ctx, frame); err != nil {
		lookup(kc, &kc.jobs.runs, r.frameID, true)
		return fail(err)
	}
	// The job_run may still be in this process's buffers: a caller told of the job before
	// the kernel has it would be told of a job that never runs if this process died now.
	// Wait for the kernel's word (its job_start, or the job's end) a while.
	t := time.NewTimer(jobStartWait)
	defer t.Stop()
	select {
	case <-r.started:
	case <-job.Done():
	case <-kc.done:
	case <-ctx.Done():
	case <-t.C:
		s.log.Warn("the kernel has not started a job yet; going on", "job", job.ID(), "waited", jobStartWait)
	}
	return job, nil
}

// jobStartWait bounds how long RunJob waits for the kernel's job_start.
const jobStartWait = 10 * time.Second

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

// hostKill kills a killed shell job's process group with SIGKILL (through g, the
// kernel's HostGroups) when it is still there after the grace, and ends the job itself
// when the kernel has not reported the end after as long again and the group is empty
// (looked at every grace, up to hostKillLooks times).
func (r *jobRun) hostKill(g transports.HostGroups, pgid int) {
	grace := r.s.opts.JobKillGrace
	killed := time.Now()
	if closedWithin(r.job.Done(), grace) {
		return
	}
	end := jobs.End{Killed: true}
	if r.groupAlive(g, pgid) {
		r.s.log.Warn("killed job still running after the grace; killing its process group", "job", r.frameID, "pgid", pgid, "grace", grace)
		if err := g.KillGroup(pgid); err != nil {
			r.s.log.Warn("killing a job's process group", "job", r.frameID, "pgid", pgid, "err", err)
		} else {
			end = jobs.End{Signal: transports.KillSignal, Killed: true}
		}
	}
	// The group's last member may take a while to go after its SIGKILL (a loaded host, a
	// large exit): look again, every grace, for up to hostKillLooks graces.
	for look := 0; ; look++ {
		if closedWithin(r.job.Done(), grace) {
			return
		}
		if !r.groupAlive(g, pgid) {
			break
		}
		if look == hostKillLooks {
			return // uninterruptible sleep; the kernel's end (or its kernel's) will come
		}
	}
	r.s.log.Warn("kernel did not report the end of a killed job; ending it", "job", r.frameID)
	r.endWithout(fmt.Errorf("job %s: the kernel did not report its end within %v of its kill: %w", r.job.ID(), time.Since(killed).Round(time.Millisecond), ErrEndedByController), end)
}

// hostKillLooks is how many more graces hostKill looks for a killed group's end.
const hostKillLooks = 50

// groupAlive asks g whether the job's group pgid has a live member; when g cannot tell,
// the group is taken for alive.
func (r *jobRun) groupAlive(g transports.HostGroups, pgid int) bool {
	alive, err := g.GroupAlive(pgid)
	if err != nil {
		r.s.log.Warn("cannot tell whether a job's process group is alive; taking it for alive", "job", r.frameID, "pgid", pgid, "err", err)
		return true
	}
	return alive
}
