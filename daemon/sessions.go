package daemon

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/output"
	"github.com/kennel-dev/kennel/sessionspec"
)

// startTimeout bounds a session's start; the start runs apart from the request's context,
// so a create whose client went away still ends registered (and found by its
// Idempotency-Key) or fully undone.
const startTimeout = 60 * time.Second

// truncation turns API limits into a Truncation (nil: the default).
func truncation(l *api.Limits) (output.Truncation, error) {
	if l == nil {
		return output.Default(), nil
	}
	if l.Off {
		return output.Off(), nil
	}
	lim := output.Limits{Bytes: l.Bytes, Lines: l.Lines}
	switch l.Keep {
	case "", "head":
		lim.Keep = output.Head
	case "tail":
		lim.Keep = output.Tail
	default:
		return output.Truncation{}, fmt.Errorf("limits keep %q: %w: head or tail", l.Keep, errInvalid)
	}
	t := output.On(lim)
	if err := t.Validate(); err != nil {
		return output.Truncation{}, fmt.Errorf("limits: %w", err)
	}
	return t, nil
}

// startSession checks req, assembles it (launch: its transport, else the Default one)
// and starts a session, registered with parent (a child's parent) and wsDir (its
// workspace). spec, when not nil, is the resolved transport to use instead of req's (a
// child takes its parent's). Nothing is left when it fails.
func (s *Server) startSession(ctx context.Context, req api.CreateSession, spec *sessionspec.Transport, parent, wsDir string) (*entry, error) {
	if spec == nil {
		spec = req.Transport
	}
	kind, err := spec.Kind()
	if err != nil {
		return nil, err
	}
	if spec != nil && kind == sessionspec.KindSSH {
		if req.Cwd != "" {
			return nil, fmt.Errorf("cwd %q: %w: an ssh session's working directory is on its host: set transport.ssh.dir", req.Cwd, errInvalid)
		}
	} else {
		if req.Cwd != "" && !filepath.IsAbs(req.Cwd) {
			return nil, fmt.Errorf("cwd %q: %w: the working directory must be an absolute path", req.Cwd, errInvalid)
		}
		if err := controller.CheckWorkingDir(req.Cwd); err != nil {
			return nil, err
		}
	}
	trunc, err := truncation(req.Limits)
	if err != nil {
		return nil, err
	}
	if spec == nil {
		var warnings []string
		if spec, warnings, err = s.opts.Default(req.Cwd); err != nil {
			return nil, err
		}
		for _, w := range warnings {
			s.log.Warn("settings: " + w)
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	defer cancel()
	parts, err := s.opts.Assemble(ctx, spec, req.Cwd)
	if err != nil {
		return nil, err
	}
	for _, w := range parts.Warnings {
		s.log.Warn("session setup: " + w)
	}
	opts := parts.Apply(controller.Options{
		Logger:         s.log,
		Bundle:         s.bundle,
		Truncation:     trunc,
		StateDir:       s.opts.StateDir,
		OnGateDecision: s.metrics.gateDecision,
	})
	if opts.Handler != nil {
		opts.Handler = countingHandler{h: opts.Handler, m: s.metrics}
	}
	sess, err := controller.Start(ctx, opts)
	if err != nil {
		parts.Release()
		return nil, err
	}
	e := &entry{
		id: sess.ID(), sess: sess, release: parts.Release, cwd: parts.Dir, transport: parts.Kind,
		req: req, spec: spec, remote: parts.Remote, created: time.Now(), parent: parent, wsDir: wsDir,
	}
	if err := s.reg.add(e); err != nil {
		s.endSession(ctx, e)
		return nil, err
	}
	return e, nil
}

func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSession
	if err := readJSON(w, r, 1<<20, &req); err != nil {
		writeError(w, err)
		return
	}
	key := r.Header.Get(api.HeaderIdempotencyKey)
	if key == "" {
		e, err := s.startSession(r.Context(), req, nil, "", "")
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, s.describe(e))
		return
	}
	if len(key) > 256 {
		writeError(w, fmt.Errorf("idempotency key: %w: at most 256 bytes", errInvalid))
		return
	}
	created := false
	id, err := s.reg.once(r.Context(), key, func() (string, error) {
		e, err := s.startSession(r.Context(), req, nil, "", "")
		if err != nil {
			return "", err
		}
		created = true
		return e.id, nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	e, ok := s.reg.get(id)
	if !ok {
		writeError(w, fmt.Errorf("session %s of idempotency key %q: %w: it was deleted", id, key, errNotFound))
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, s.describe(e))
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	list := api.SessionList{Sessions: []api.Session{}}
	for _, e := range s.reg.list() {
		list.Sessions = append(list.Sessions, s.describe(e))
	}
	writeJSON(w, http.StatusOK, list)
}

// session finds the session of the request's {id}.
func (s *Server) session(r *http.Request) (*entry, error) {
	id := r.PathValue("id")
	e, ok := s.reg.get(id)
	if !ok {
		return nil, fmt.Errorf("session %q: %w", id, errNotFound)
	}
	return e, nil
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	e, err := s.session(r)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.describe(e))
}

func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	e, ok := s.reg.take(id)
	if !ok {
		writeError(w, fmt.Errorf("session %q: %w", id, errNotFound))
		return
	}
	s.endSession(r.Context(), e)
	w.WriteHeader(http.StatusNoContent)
}

// describe is a session's API view; it reads the kernel observation without starting a
// kernel.
func (s *Server) describe(e *entry) api.Session {
	out := api.Session{
		ID: e.id, Cwd: e.cwd, CreatedAt: e.created.UnixMilli(), Parent: e.parent, Workspace: e.wsDir,
	}
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	state := "idle"
	if closed {
		state = "closed"
	}
	if hello, info, ok := e.sess.Kernel(); ok && !closed {
		state = "running"
		t := info.Transport
		out.Kernel.Transport = &t
		if hello.PID > 0 {
			pid := hello.PID
			out.Kernel.PID = &pid
		}
	}
	out.Kernel.State = &state
	obs := e.sess.Jobs().Observe()
	n := obs.LiveJobCount
	out.Kernel.LiveJobCount = &n
	out.Kernel.RunningJobs = make([]api.RunningJob, 0, len(obs.RunningJobs))
	for _, o := range obs.RunningJobs {
		out.Kernel.RunningJobs = append(out.Kernel.RunningJobs, api.RunningJob{
			ID: o.ID.String(), PID: o.PID, Command: jobs.TakeScalars(o.Command, jobs.MaxCommand), StartedAt: o.StartedAt,
		})
	}
	return out
}
