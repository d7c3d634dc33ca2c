package daemon

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/output"
	"github.com/kennel-dev/kennel/sessionspec"
	"github.com/kennel-dev/kennel/store"
	"github.com/kennel-dev/kennel/transports"
)

// startTimeout bounds a session's start; the start runs apart from the request's context,
// so a create whose client went away still ends registered (and found by its
// Idempotency-Key) or fully undone.
const startTimeout = 60 * time.Second

// truncation turns API limits into a Truncation (nil: the default), refusing limits
// that are not valid (a kernel memory cap below -1 too).
func truncation(l *api.Limits) (output.Truncation, error) {
	if l == nil {
		return output.Default(), nil
	}
	if l.KernelMemoryBytes < -1 {
		return output.Truncation{}, fmt.Errorf("limits kernel_memory_bytes %d: %w: a number of bytes, 0 (the default) or -1 (none)", l.KernelMemoryBytes, errInvalid)
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

// kernelMemory is the kernel memory cap of API limits (controller.Options.KernelMemory).
func kernelMemory(l *api.Limits) int64 {
	if l == nil {
		return 0
	}
	return l.KernelMemoryBytes
}

// startSession checks req, assembles it (launch: its transport, else the Default one)
// and starts a session, registered with parent (a child's parent) and wsDir (its
// workspace). spec, when not nil, is the resolved transport to use instead of req's (a
// child takes its parent's). Nothing is left when it fails.
func (s *Server) startSession(ctx context.Context, req api.CreateSession, spec *sessionspec.Transport, parent, wsDir string) (*entry, error) {
	spec = cmp.Or(spec, req.Transport)
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
	return s.open(ctx, req, spec, trunc, store.Session{ID: newSessionID(), Created: time.Now(), Parent: parent, Workspace: wsDir})
}

// newSessionID returns a random 12-hex-digit session id.
func newSessionID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// open assembles and starts the session rec describes (a new one, or one restored from
// the store, whose kernel rec.Kernel it resumes) and keeps its record in the store: the
// session and, as each kernel starts, its kernel's record. Nothing is left when it fails.
func (s *Server) open(ctx context.Context, req api.CreateSession, spec *sessionspec.Transport, trunc output.Truncation, rec store.Session) (*entry, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	defer cancel()
	parts, err := s.opts.Assemble(ctx, spec, req.Cwd)
	if err != nil {
		return nil, err
	}
	if rec.Request, err = json.Marshal(req); err != nil {
		parts.Release()
		return nil, err
	}
	if rec.Spec, err = json.Marshal(spec); err != nil {
		parts.Release()
		return nil, err
	}
	rec.Cwd = parts.Dir
	k := &kernelRecords{st: s.store, id: rec.ID, log: s.log}
	for _, w := range parts.Warnings {
		s.log.Warn("session setup: " + w)
	}
	opts := parts.Apply(controller.Options{
		Logger:         s.log,
		Bundle:         s.bundle,
		Truncation:     trunc,
		KernelMemory:   kernelMemory(req.Limits),
		StateDir:       s.opts.StateDir,
		OnGateDecision: s.metrics.gateDecision,
		ID:             rec.ID,
		IDBase:         rec.Epoch * store.IDsPerEpoch,
		Resume:         rec.Kernel,
		Background:     rec.Epoch > 0, // a restored session answers at once; its kernel follows
		OnKernel:       k.kernel,
		OnJob:          s.jobRecorder(rec.ID, rec.Epoch),
	})
	if rec.Kernel != nil {
		opts.ResumeJobs = s.resumeJobs(rec.ID, rec.Epoch)
	}
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
		req: req, spec: spec, remote: parts.Remote, created: rec.Created, parent: rec.Parent, wsDir: rec.Workspace,
	}
	_, e.resumable = parts.Transport.(transports.Reattacher)
	if _, info, ok := sess.Kernel(); ok {
		e.pool = info.Pool
	}
	e.epoch = rec.Epoch
	if err := k.store(rec); err != nil {
		s.endSession(ctx, e)
		return nil, fmt.Errorf("session %s: %w", rec.ID, err)
	}
	if err := s.reg.add(e); err != nil {
		s.endSession(ctx, e)
		return nil, err
	}
	for _, jr := range opts.ResumeJobs {
		if _, ok := sess.Jobs().Job(jr.ID); ok {
			s.trackJob(e, jr.ID) // picked up: its end is recorded as this daemon's jobs' are
		}
	}
	return e, nil
}

// kernelRecords keeps a session's kernel record in the store as each kernel starts. The
// first kernel starts before the session is stored: its record waits for store.
type kernelRecords struct {
	st  *store.Store
	id  string
	log *slog.Logger

	mu     sync.Mutex
	stored bool
	first  *transports.Record
}

// kernel is the controller's OnKernel.
func (k *kernelRecords) kernel(rec transports.Record) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.stored {
		k.first = &rec
		return
	}
	if err := k.st.Update(k.id, func(s *store.Session) error { s.Kernel = &rec; return nil }); err != nil {
		k.log.Warn("keeping the kernel's record", "session", k.id, "err", err)
	}
}

// store puts the session, with the first kernel's record when one started; a restored
// session keeps the record of the kernel it is resuming meanwhile (a daemon that dies
// before the resume ends leaves it to the next).
func (k *kernelRecords) store(rec store.Session) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.first != nil {
		rec.Kernel = k.first
	}
	if err := k.st.Put(rec); err != nil {
		return err
	}
	k.stored = true
	return nil
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
		d := s.describe(e)
		d.Pool = e.pool
		writeJSON(w, http.StatusCreated, d)
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
	d := s.describe(e)
	if created {
		status = http.StatusCreated
		d.Pool = e.pool
	}
	writeJSON(w, status, d)
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	list := api.SessionList{Sessions: []api.Session{}}
	for _, e := range s.reg.list() {
		list.Sessions = append(list.Sessions, s.describe(e))
	}
	writeJSON(w, http.StatusOK, list)
}

// inSession is h given the session of the request's {id}; one the daemon does not
// have is answered not found.
func (s *Server) inSession(h func(http.ResponseWriter, *http.Request, *entry)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		e, ok := s.reg.get(id)
		if !ok {
			writeError(w, fmt.Errorf("session %q: %w", id, errNotFound))
			return
		}
		h(w, r, e)
	}
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request, e *entry) {
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
	switch {
	case closed:
		state = "closed"
	case e.sess.Reattaching():
		state = "reattaching"
	case e.sess.Origin().Lost != nil:
		state = "lost" // until a cell starts a fresh kernel
	}
	origin := "fresh"
	if o := e.sess.Origin(); o.Resumed {
		origin = "resumed"
	} else if o.Lost != nil {
		lost := o.Lost.Error()
		out.Kernel.Lost = &lost
	}
	out.Kernel.Origin = &origin
	if hello, info, ok := e.sess.Kernel(); ok && !closed {
		state = "running"
		t := info.Transport
		out.Kernel.Transport = &t
		if hello.PID > 0 {
			pid := hello.PID
			out.Kernel.PID = &pid
		}
		build, stale := hello.Bundle, e.sess.Stale()
		out.Kernel.Build, out.Kernel.Stale = &build, &stale
		if rec, ok := e.sess.Record(); ok {
			out.Kernel.InstanceID = &rec.Kernel
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

// restoreParallel bounds how many stored sessions a starting daemon restores at once.
const restoreParallel = 8

// restore serves again every session the store holds: each is assembled as it was and
// its recorded kernel resumed (namespace and all), or, when that kernel is gone, given a
// fresh one (its view says the namespace was lost and why). A session that cannot be
// restored now because something is out of reach (errdefs.ErrUnavailable: an engine, a
// host) stays in the store for the next start; one that cannot be restored at all is
// forgotten, saying why.
func (s *Server) restore(ctx context.Context) {
	recs, err := s.store.Sessions()
	if err != nil {
		s.log.Error("reading the stored sessions", "err", err)
		return
	}
	sem := make(chan struct{}, restoreParallel)
	var wg sync.WaitGroup
	for _, rec := range recs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var req api.CreateSession
			var spec *sessionspec.Transport
			err := json.Unmarshal(rec.Request, &req)
			if err == nil {
				err = json.Unmarshal(rec.Spec, &spec)
			}
			var trunc output.Truncation
			if err == nil {
				trunc, err = truncation(req.Limits)
			}
			if err == nil {
				rec.Epoch++
				var e *entry
				if e, err = s.open(ctx, req, spec, trunc, rec); err == nil {
					s.log.Debug("session restored; its kernel is reattached in the background", "session", e.id)
					go s.redrive(e)
					return
				}
			}
			if errdefs.IsUnavailable(err) {
				s.log.Warn("session not restored now; kept for the next start", "session", rec.ID, "err", err)
				return
			}
			s.log.Warn("session cannot be restored; forgotten", "session", rec.ID, "err", err)
			if derr := s.store.Delete(rec.ID); derr != nil {
				s.log.Warn("forgetting the session", "session", rec.ID, "err", derr)
			}
		})
	}
	wg.Wait()
}
