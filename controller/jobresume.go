package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/transports"
)

// ErrJobEndUnseen: a job an earlier controller started ended while no controller was
// attached to its kernel, and its end was not seen (that controller took it and died
// before it was recorded). Its output, read from its files, is whole.
var ErrJobEndUnseen = errdefs.ErrUnknown.WithMessage("the job ended while no controller was attached; how is not known")

// JobRecord is what a later controller needs to pick up a shell job that ran on in a
// detached kernel (Options.OnJob gives it, Options.ResumeJobs takes it back). It is plain
// data (JSON) for a store.
type JobRecord struct {
	// ID is the job's id in the session's table; FrameID names it in its kernel's frames.
	ID      jobs.ID `json:"id"`
	FrameID string  `json:"frame_id"`
	// Kernel is the kernel that runs it (transports.Record.Kernel; "" for a kernel that
	// cannot be reattached): it is picked up only with that kernel.
	Kernel string `json:"kernel,omitempty"`
	// Command and Started are the job's.
	Command string    `json:"command"`
	Started time.Time `json:"started"`
	// Way is how its output comes: "" frames, "host" files the controller made (the kernel
	// names them by their host paths), "mount" the same seen through a mount, "transport"
	// files and streams of the kernel's transport (transports.JobOutputs).
	Way string `json:"way,omitempty"`
	// Paths are its output files as the kernel named them (job_run's stdout, stderr);
	// HostPaths are the same on this host (Way host or mount).
	Paths     [2]string `json:"paths,omitzero"`
	HostPaths [2]string `json:"host_paths,omitzero"`
}

// record is r's JobRecord.
func (r *jobRun) record(host [2]string) JobRecord {
	rec := JobRecord{
		ID: r.job.ID(), FrameID: r.frameID, Command: r.job.Command(), Started: r.job.Started(),
		Way: string(r.way), Paths: r.paths, HostPaths: host,
	}
	if d, ok := r.kc.k.(transports.Detachable); ok {
		rec.Kernel = d.Record().Kernel
	}
	return rec
}

// adoptJobs puts the jobs of Options.ResumeJobs in the table (initJobs, before any
// kernel): each job whose files are on this host has its tail started at once; they wait
// in s.jobs.adopted for the kernel that runs them. A job of another kernel than Resume's
// (an earlier one, lost) ends at once, its files read to their end. A record that cannot
// be adopted is logged and left.
func (s *Session) adoptJobs(recs []JobRecord) {
	var others []*jobRun
	for _, rec := range recs {
		r := &jobRun{s: s, kind: shellJob, frameID: rec.FrameID, way: jobWay(rec.Way), paths: rec.Paths}
		job, err := s.jobs.table.Adopt(rec.ID, rec.Started, jobs.Spec{Command: rec.Command, Owner: r})
		if err != nil {
			s.log.Warn("a recorded job is not picked up", "job", rec.ID, "err", err)
			continue
		}
		r.job = job
		s.jobs.add(r)
		switch r.way {
		case waySameFS, wayJobOutDir:
			f, err := resumeJobFiles(rec.HostPaths, rec.Paths, s.jobs.keep, job, s.jobs.filePool)
			if err != nil {
				r.endWithout(fmt.Errorf("job %s: its output files: %w: %w", rec.ID, ErrKernelExited, err), jobs.End{})
				continue
			}
			r.streams = f
		}
		if s.opts.Resume == nil || rec.Kernel != s.opts.Resume.Kernel {
			others = append(others, r)
			continue
		}
		s.jobs.adopted = append(s.jobs.adopted, r)
	}
	s.endAdopted(others, errors.New("the kernel that ran it is gone"))
}

// takeAdopted hands the adopted jobs to kc, the kernel resumed: each is its run from
// now on, a transport's output streams opened again, before kc's reader starts (so no
// frame of theirs is missed). s.mu is held.
func (s *Session) takeAdopted(ctx context.Context, kc *kernelConn) {
	adopted := s.jobs.adopted
	s.jobs.adopted = nil
	for _, r := range adopted {
		if _, ended := r.job.End(); ended {
			continue
		}
		r.mu.Lock()
		r.kc = kc
		r.mu.Unlock()
		if r.way == wayTransport {
			r.streams = s.resumeRemote(ctx, kc, r)
		}
		kc.jobs.runs[r.frameID] = r
	}
}

// resumeRemote opens a transport job's streams again (nil: they cannot be; its output
// from here on is lost to this controller, and counted in nothing).
func (s *Session) resumeRemote(ctx context.Context, kc *kernelConn, r *jobRun) jobStreams {
	jo, ok := kc.k.(transports.JobOutputs)
	if !ok {
		return nil
	}
	octx, cancel := context.WithTimeout(ctx, jobOutputOpenTimeout)
	defer cancel()
	out, err := jo.OpenJobOutput(octx, transports.JobOutputRequest{Keep: s.jobs.keep, Resume: r.paths})
	if err != nil {
		s.log.Warn("a recorded job's output cannot be read again", "job", r.job.ID(), "err", err)
		return nil
	}
	return newRemoteOutput(out, r.job)
}

// endAdopted ends adopted jobs whose kernel will not be resumed (gone, or given up):
// each reads its files to their end and ends with cause.
func (s *Session) endAdopted(adopted []*jobRun, cause error) {
	for _, r := range adopted {
		go func() {
			if r.streams != nil {
				r.streams.drain(s.opts.JobKillGrace)
			}
			r.endWithout(fmt.Errorf("job %s: %w: %w", r.job.ID(), ErrKernelExited, cause), jobs.End{})
		}()
	}
}

// settleAdopted checks kc's hello against the jobs it took over: a job the kernel still
// runs has its pid (and, where the controller may signal it, its verified group); one it
// does not has ended meanwhile, and unless its job_end is among the frames the kernel
// still held, it ends after JobKillGrace with ErrJobEndUnseen, its files read to their
// end first.
func (kc *kernelConn) settleAdopted() {
	live := map[string]bool{}
	for _, j := range kc.hello.Jobs {
		live[j.ID] = true
		r := kc.job(j.ID, false)
		if r == nil {
			continue
		}
		_ = r.job.SetPID(j.PID)
		if g := kc.jobs.groups; g != nil && g.VerifyGroup(j.PID, j.PGID) == nil {
			r.mu.Lock()
			r.pgid = j.PGID
			r.mu.Unlock()
		}
	}
	kc.mu.Lock()
	var gone []*jobRun
	for id, r := range kc.jobs.runs {
		if !live[id] && r.adopted() {
			gone = append(gone, r)
		}
	}
	kc.mu.Unlock()
	for _, r := range gone {
		go func() {
			if closedWithin(r.job.Done(), kc.s.opts.JobKillGrace) {
				return // its job_end came
			}
			if kc.job(r.frameID, true) == nil {
				return // its job_end is being taken
			}
			if r.streams != nil {
				r.streams.drain(kc.s.opts.JobKillGrace)
			}
			r.endWithout(fmt.Errorf("job %s: %w", r.job.ID(), ErrJobEndUnseen), jobs.End{})
		}()
	}
}

// adopted reports whether r is a job an earlier controller started.
func (r *jobRun) adopted() bool { return r.job.ID() <= jobs.ID(r.s.opts.IDBase) }

// JobRecorded says the store now holds job id's end: its output files, left for a
// controller that comes later until then (Options.OnJob), are removed. An id with no
// files is nothing.
func (s *Session) JobRecorded(id jobs.ID) {
	r, err := s.jobs.get(id)
	if err != nil || r.streams == nil {
		return
	}
	r.streams.remove()
}
