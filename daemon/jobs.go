package daemon

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/store"
)

// defaultPage is the page size of an output read that names no limit.
const defaultPage = 64 << 10

// jobOf finds the request's {job} in session e: an id that does not parse, or that the
// session does not know, is not found.
func jobOf(r *http.Request, e *entry) (*jobs.Job, error) {
	raw := r.PathValue("job")
	id, err := jobs.ParseID(raw)
	if err != nil {
		return nil, fmt.Errorf("job %q: %w", raw, errNotFound)
	}
	j, ok := e.sess.Jobs().Job(id)
	if !ok {
		return nil, fmt.Errorf("job %q of session %s: %w", raw, e.id, errNotFound)
	}
	return j, nil
}

// toJob is a job's API view. It reads the job's state alone, never its output (under
// truncation off a report of the output would read the job's retained bytes whole).
func toJob(j *jobs.Job) api.Job {
	out := api.Job{ID: j.ID().String(), Command: j.Command(), StartedAt: j.Started().UnixMilli(), State: "running"}
	if pid, ok := j.PID(); ok {
		out.PID = &pid
	}
	if end, ok := j.End(); ok {
		out.State, out.End = "ended", toJobEnd(end)
	}
	return out
}

// toJobEnd is a job's end's API view.
func toJobEnd(end jobs.End) *api.JobEnd {
	e := &api.JobEnd{ExitCode: end.ExitCode, Killed: end.Killed, Interrupted: end.Interrupted, Text: end.String()}
	if end.Signal != 0 {
		sig := end.Signal
		e.Signal = &sig
	}
	return e
}

func (s *Server) handleJobs(w http.ResponseWriter, r *http.Request, e *entry) {
	list := api.JobList{Jobs: []api.Job{}}
	for _, r := range s.recordedJobs(e) {
		list.Jobs = append(list.Jobs, fromRecord(r))
	}
	for _, id := range e.jobList() {
		if j, ok := e.sess.Jobs().Job(id); ok {
			s.account(e, j)
			list.Jobs = append(list.Jobs, toJob(j))
		}
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) handleRunJob(w http.ResponseWriter, r *http.Request, e *entry) {
	var req api.RunJob
	if err := readJSON(w, r, 1<<20, &req); err != nil {
		writeError(w, err)
		return
	}
	j, err := e.sess.RunJob(r.Context(), req.Command, controller.JobOptions{})
	if err != nil {
		writeError(w, err)
		return
	}
	s.trackJob(e, j.ID())
	writeJSON(w, http.StatusCreated, toJob(j))
}

// queryInt64 reads an optional non-negative integer query parameter.
func queryInt64(r *http.Request, name string, def int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("query %s=%q: %w: a non-negative integer", name, v, errInvalid)
	}
	return n, nil
}

func (s *Server) handleOutput(w http.ResponseWriter, r *http.Request, e *entry) {
	j, err := jobOf(r, e)
	rec, recorded := store.Job{}, false
	if err != nil {
		if rec, recorded = s.recordedJob(e, r.PathValue("job")); !recorded {
			writeError(w, err)
			return
		}
	}
	offset, oerr := queryInt64(r, "offset", 0)
	limit, lerr := queryInt64(r, "limit", defaultPage)
	if err := cmp.Or(oerr, lerr); err != nil {
		writeError(w, err)
		return
	}
	if recorded {
		p, err := recordedPage(rec, offset, limit)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, p)
		return
	}
	p, err := j.Capture().ReadPage(offset, limit)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.OutputPage{Offset: p.Offset, Data: p.Data, Seen: p.Seen, EOF: p.EOF, More: p.More})
}

// handleStop asks the job's owner to stop it once, then waits up to Options.StopWait for
// its end: the ended job, or CodeUnconfirmed. It never asks twice.
func (s *Server) handleStop(w http.ResponseWriter, r *http.Request, e *entry) {
	j, err := jobOf(r, e)
	if err != nil {
		if _, recorded := s.recordedJob(e, r.PathValue("job")); recorded {
			err = fmt.Errorf("job %s ran under an earlier daemon, whose end this one did not see: it cannot be stopped from here (its kernel ends what it started when it ends): %w", r.PathValue("job"), errConflict)
		}
		writeError(w, err)
		return
	}
	if err := e.sess.KillJob(r.Context(), j.ID()); err != nil && !errors.Is(err, jobs.ErrEnded) {
		writeError(w, err)
		return
	}
	jw, err := e.sess.WaitJob(r.Context(), j.ID(), s.opts.StopWait)
	if err != nil {
		writeError(w, err)
		return
	}
	if _, ok := jw.Outcome.(jobs.Settled); !ok {
		writeError(w, &api.Error{
			Status: http.StatusGatewayTimeout, Code: api.CodeUnconfirmed,
			Message: fmt.Sprintf("job %s: the stop was asked for but its end was not confirmed within %v; the outcome is unknown: read the job before trying again", j.ID(), s.opts.StopWait),
		})
		return
	}
	s.account(e, j)
	writeJSON(w, http.StatusOK, api.StopReply{Job: toJob(j)})
}
