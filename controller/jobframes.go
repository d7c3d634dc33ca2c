package controller

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"

	"github.com/kennel-dev/kennel/controller/gate"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/protocol"
	"github.com/kennel-dev/kennel/transports"
)

// kernelJobs are the shell jobs one kernel generation runs, by frame id (kc.mu guards
// runs). groups, fixed at the generation's start, is the kernel's transports.HostGroups,
// or nil when the controller may not signal its jobs' groups itself; dec decodes job
// output on the reader goroutine.
type kernelJobs struct {
	runs   map[string]*jobRun
	groups transports.HostGroups
	dec    protocol.JobOutputDecoder
}

// newKernelJobs returns the job record of a new generation of kernel k.
func newKernelJobs(k transports.Kernel) kernelJobs {
	return kernelJobs{runs: make(map[string]*jobRun), groups: transports.GroupsOf(k)}
}

// job returns the running shell job the kernel names id, or nil; take takes it out.
func (kc *kernelConn) job(id string, take bool) *jobRun {
	return lookup(kc, &kc.jobs.runs, id, take)
}

// endJobs ends the jobs of a kernel generation that ended with err.
func endJobs(runs map[string]*jobRun, err error) {
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Go(func() { r.endWithout(err, jobs.End{}) })
	}
	wg.Wait()
}

// onJobOutput routes a job_output frame to its job, decoded without encoding/json when
// it is in the stub's own layout (protocol.JobOutputDecoder). Like every job frame's
// handler it runs on the reader goroutine, never blocks on a caller, and drops a frame
// naming no running job.
func (kc *kernelConn) onJobOutput(f gate.Frame) {
	r := kc.job(f.ID, false)
	if r == nil {
		kc.s.log.Debug("output of no running job dropped", "id", f.ID)
		return
	}
	data, err := kc.jobs.dec.Decode(f.Line, f.ID)
	if err != nil {
		kc.s.log.Warn("undecodable job output dropped", "id", f.ID, "err", err)
		return
	}
	_ = r.job.Output(data) // after the end: ignored and counted by the job
}

// onJobStart records the job's pid and, for a kernel with HostGroups, its process group
// once the kernel's host has verified it (only then may the controller signal it).
func (kc *kernelConn) onJobStart(f gate.Frame) {
	log := kc.s.log
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
	if r.started != nil {
		r.startMu.Do(func() { close(r.started) })
	}
	// The group is verified first and known (r.pgid) by the time the pid is: a Kill
	// that follows the pid's publication always finds the group to kill.
	pgid := 0
	if g := kc.jobs.groups; g != nil {
		if err := g.VerifyGroup(e.PID, e.PGID); err != nil {
			level := slog.LevelWarn
			if errors.Is(err, fs.ErrNotExist) {
				level = slog.LevelDebug // it has exited already
			}
			log.Log(context.Background(), level, "job's process group not verified; only its kernel can kill it", "job", e.ID, "err", err)
		} else {
			pgid = e.PGID
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.job.SetPID(e.PID); err != nil {
		log.Warn("job_start refused", "job", e.ID, "err", err)
		return
	}
	r.pgid = pgid
}

func (kc *kernelConn) onJobEnd(f gate.Frame) {
	log := kc.s.log
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
	if r.streams == nil {
		r.finish(end)
		return
	}
	go func() {
		r.streams.drain(kc.s.opts.JobKillGrace)
		r.finish(end)
	}()
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
