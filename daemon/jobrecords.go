package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/output"
	"github.com/kennel-dev/kennel/store"
)

// Every shell job started through the API is recorded in the store at its start and at
// its end, with the start of its output kept in a file beside the store (cells are not:
// two fsyncs per cell would cost every cell's latency; a keyed cell has its own record): after a restart, `kennel jobs` lists the jobs an earlier daemon ran and `kennel
// logs` reads what they wrote. A job the earlier daemon saw start but not end is listed
// with state "unknown": it may have ended, or run on in a resumed kernel, but its end and
// its later output were not seen by this daemon.

// maxKept bounds the output a job's record keeps: its first MiB.
const maxKept = 1 << 20

// jobsDir is where session id's jobs' kept output lives.
func (s *Server) jobsDir(id string) string { return filepath.Join(s.opts.StateDir, "jobs", id) }

// jobRecorder is a session's controller.Options.OnJob: the record of each shell job is
// in the store before its kernel is told to run it, so a daemon that dies at any moment
// after leaves a record the next one picks the job up from (a job the store cannot take
// is refused: on a full disk, 507 no_space).
func (s *Server) jobRecorder(session string, epoch uint64) func(controller.JobRecord) error {
	return func(jr controller.JobRecord) error {
		raw, err := json.Marshal(jr)
		if err != nil {
			return err
		}
		rec := store.Job{ID: jr.ID.String(), Epoch: epoch, Command: jr.Command, Started: jr.Started, State: store.JobRunning, Resume: raw}
		if _, err := s.store.PutJob(session, rec); err != nil {
			return fmt.Errorf("record job %s: %w", jr.ID, err)
		}
		return nil
	}
}

// resumeJobs are the jobs of session id an earlier daemon recorded running with what a
// controller needs to pick them up: the Options.ResumeJobs of its resumed kernel.
func (s *Server) resumeJobs(id string, epoch uint64) []controller.JobRecord {
	recs, err := s.store.Jobs(id)
	if err != nil {
		s.log.Warn("reading the session's job records", "session", id, "err", err)
		return nil
	}
	var out []controller.JobRecord
	for _, r := range recs {
		if r.State != store.JobRunning || r.Epoch >= epoch || len(r.Resume) == 0 {
			continue
		}
		var jr controller.JobRecord
		if err := json.Unmarshal(r.Resume, &jr); err != nil || jr.ID.String() != r.ID {
			s.log.Warn("a job record that cannot be picked up", "session", id, "job", r.ID, "err", err)
			continue
		}
		out = append(out, jr)
	}
	return out
}

// trackJob is entry.addJob for a shell job this daemon runs (started, or picked up from
// an earlier daemon's record), whose end it records.
func (s *Server) trackJob(e *entry, id jobs.ID) {
	e.addJob(id)
	j, ok := e.sess.Jobs().Job(id)
	if !ok {
		return
	}
	e.mu.Lock()
	if e.recorded == nil {
		e.recorded = map[jobs.ID]bool{}
	}
	seen := e.recorded[id]
	e.recorded[id] = true
	e.mu.Unlock()
	if seen {
		return
	}
	rec := store.Job{ID: id.String(), Epoch: e.epoch, Command: j.Command(), Started: j.Started(), State: store.JobRunning}
	s.records.Go(func() {
		<-j.Done()
		e.mu.Lock()
		detaching := e.detaching
		e.mu.Unlock()
		if detaching {
			return // let go with its kernel: it runs on, its record says so
		}
		end, err := json.Marshal(toJob(j).End)
		if err != nil {
			return
		}
		rec.State, rec.End, rec.Seen = store.JobEnded, end, j.Capture().Stat().Seen
		if kept, err := s.keepOutput(e.id, id, j.Capture()); err != nil {
			s.log.Warn("keeping a job's output", "session", e.id, "job", id, "err", err)
		} else {
			rec.Kept = kept
		}
		dropped, err := s.store.PutJob(e.id, rec)
		if errors.Is(err, store.ErrNoSession) {
			_ = os.Remove(rec.Kept) // the session is gone, and its records
			return
		}
		if err != nil {
			s.log.Warn("recording a job's end", "session", e.id, "job", id, "err", err)
			return
		}
		e.sess.JobRecorded(id) // its end is in the store: its output files may go
		if dropped != nil && dropped.Kept != "" {
			_ = os.Remove(dropped.Kept)
		}
	})
}

// keepOutput writes the start of c's output (up to maxKept) to the job's kept file,
// 0600, and returns its path.
func (s *Server) keepOutput(session string, id jobs.ID, c *output.Capture) (string, error) {
	dir := s.jobsDir(session)
	if err := output.PrepareDir(filepath.Dir(dir)); err != nil {
		return "", err
	}
	if err := output.PrepareDir(dir); err != nil {
		return "", err
	}
	path := filepath.Join(dir, id.String())
	f, err := os.OpenFile(path+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", err
	}
	var off int64
	for err == nil && off < maxKept {
		p, rerr := c.ReadPage(off, min(output.MaxPage, maxKept-off))
		if rerr != nil || len(p.Data) == 0 {
			break // what is not readable now (lost, or the end) is not kept
		}
		_, err = f.Write(p.Data)
		off += int64(len(p.Data))
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr // a close that fails (a full disk on some file systems) keeps nothing
	}
	if err != nil {
		os.Remove(path + ".tmp")
		return "", err
	}
	return path, os.Rename(path+".tmp", path)
}

// recordedJobs are e's job records of earlier daemons' tables (the ones its own table
// does not hold), oldest first.
func (s *Server) recordedJobs(e *entry) []store.Job {
	recs, err := s.store.Jobs(e.id)
	if err != nil {
		s.log.Warn("reading the session's job records", "session", e.id, "err", err)
		return nil
	}
	var out []store.Job
	for _, r := range recs {
		if r.Epoch >= e.epoch {
			continue
		}
		if id, err := jobs.ParseID(r.ID); err == nil {
			if _, live := e.sess.Jobs().Job(id); live {
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// recordedJob is e's record of job raw from an earlier daemon, if there is one.
func (s *Server) recordedJob(e *entry, raw string) (store.Job, bool) {
	for _, r := range s.recordedJobs(e) {
		if r.ID == raw {
			return r, true
		}
	}
	return store.Job{}, false
}

// fromRecord is a recorded job's API view: ended as recorded, or "unknown" when the
// daemon that ran it never saw its end.
func fromRecord(r store.Job) api.Job {
	out := api.Job{ID: r.ID, Command: r.Command, StartedAt: r.Started.UnixMilli(), State: "unknown"}
	if r.State == store.JobEnded {
		var end api.JobEnd
		if json.Unmarshal(r.End, &end) == nil {
			out.State, out.End = "ended", &end
		}
	}
	return out
}

// recordedPage is a page of a recorded job's kept output: the start of what it wrote.
func recordedPage(r store.Job, offset, limit int64) (api.OutputPage, error) {
	var kept []byte
	if r.Kept != "" {
		b, err := os.ReadFile(r.Kept)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return api.OutputPage{}, err
		}
		kept = b
	}
	limit = min(limit, output.MaxPage)
	seen := max(r.Seen, int64(len(kept)))
	if offset > int64(len(kept)) || (offset == int64(len(kept)) && offset < seen && limit > 0) {
		return api.OutputPage{}, &api.Error{Status: http.StatusRequestedRangeNotSatisfiable, Code: api.CodeOutputRefused,
			Message: fmt.Sprintf("job %s ran under an earlier daemon, which kept the first %d of its %d bytes; offset %d is past them", r.ID, len(kept), r.Seen, offset)}
	}
	end := min(offset+limit, int64(len(kept)))
	p := api.OutputPage{Offset: offset, Data: kept[offset:end], Seen: seen}
	p.EOF = r.State == store.JobEnded && end == seen
	return p, nil
}
