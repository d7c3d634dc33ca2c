package daemon

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/sessionspec"
)

// entry is one session the daemon owns.
type entry struct {
	id        string
	sess      *controller.Session
	release   func()
	cwd       string
	transport string // the kind asked for, for metrics before a kernel runs
	resumable bool   // its transport reattaches to kernels a shutdown let go of
	epoch     uint64 // the daemon start serving it (store.Session.Epoch)
	req       api.CreateSession
	spec      *sessionspec.Transport // the transport assembled (req's, or the default one)
	remote    bool                   // cwd is on the kernel's host (ssh), not this machine
	created   time.Time
	parent    string // the parent session of a child
	wsDir     string // a child's workspace directory
	pool      string // its first kernel's transports.Info.Pool: a warm pool's hit or miss, or ""

	mu        sync.Mutex
	jobIDs    []jobs.ID            // jobs started through the API, in order
	accounted map[jobs.ID]struct{} // ended jobs whose bytes the metrics counted
	recorded  map[jobs.ID]bool     // jobs whose record the store keeps
	keyed     map[string]jobs.ID   // the jobs of the keyed cells this daemon runs, by key
	detaching bool                 // a shutdown lets the kernel go: jobs' ends are not recorded
	closed    bool
}

// pruneAt is how many job ids an entry holds before it forgets those its session's table
// no longer keeps (the table keeps the live jobs and the newest ended ones).
const pruneAt = 4 * jobs.DefaultRetain

// addJob records a job started through the API. Ids the table forgot are dropped once
// the list grows past pruneAt, so the list stays bounded by what the table keeps.
func (e *entry) addJob(id jobs.ID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.jobIDs) > 0 && e.jobIDs[len(e.jobIDs)-1] == id {
		return
	}
	e.jobIDs = append(e.jobIDs, id)
	if len(e.jobIDs) < pruneAt {
		return
	}
	gone := func(j jobs.ID) bool {
		_, ok := e.sess.Jobs().Job(j)
		return !ok
	}
	e.jobIDs = slices.DeleteFunc(e.jobIDs, gone)
	maps.DeleteFunc(e.accounted, func(j jobs.ID, _ struct{}) bool { return gone(j) })
}

// jobList returns the ids of the jobs the session knows: those started through the API
// and any live one, in id order, without repeats.
func (e *entry) jobList() []jobs.ID {
	e.mu.Lock()
	ids := append([]jobs.ID(nil), e.jobIDs...)
	e.mu.Unlock()
	for _, j := range e.sess.Jobs().Live() {
		ids = append(ids, j.ID())
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// firstAccount reports whether the ended job id is counted for the first time.
func (e *entry) firstAccount(id jobs.ID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.accounted == nil {
		e.accounted = make(map[jobs.ID]struct{})
	}
	if _, ok := e.accounted[id]; ok {
		return false
	}
	e.accounted[id] = struct{}{}
	return true
}

// idem is one Idempotency-Key's create: done is closed when it has an outcome.
type idem struct {
	done chan struct{}
	id   string
	err  error
}

// registry holds the daemon's sessions and the outcomes of idempotent creates.
type registry struct {
	mu       sync.Mutex
	sessions map[string]*entry
	keys     map[string]*idem
	closed   bool
}

func newRegistry() *registry {
	return &registry{sessions: make(map[string]*entry), keys: make(map[string]*idem)}
}

var errShuttingDown = errdefs.ErrConflict.WithMessage("the daemon is shutting down")

// add registers e; it refuses once the registry is closed.
func (r *registry) add(e *entry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errShuttingDown
	}
	r.sessions[e.id] = e
	return nil
}

// get returns the session id.
func (r *registry) get(id string) (*entry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.sessions[id]
	return e, ok
}

// take removes and returns the session id: exactly one caller gets it.
func (r *registry) take(id string) (*entry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.sessions[id]
	delete(r.sessions, id)
	return e, ok
}

// list returns the sessions ordered by creation time, then id.
func (r *registry) list() []*entry {
	r.mu.Lock()
	out := slices.AppendSeq(make([]*entry, 0, len(r.sessions)), maps.Values(r.sessions))
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b *entry) int {
		return cmp.Or(a.created.Compare(b.created), strings.Compare(a.id, b.id))
	})
	return out
}

// closeAll closes the registry to new sessions and returns every session, removed.
func (r *registry) closeAll() []*entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	out := slices.Collect(maps.Values(r.sessions))
	clear(r.sessions)
	return out
}

// once runs create at most once per key at a time: the first caller with key runs it and
// every concurrent or later caller gets its outcome (a session id). A failed create
// forgets the key, so a retry creates again.
func (r *registry) once(ctx context.Context, key string, create func() (string, error)) (string, error) {
	r.mu.Lock()
	if in, ok := r.keys[key]; ok {
		r.mu.Unlock()
		select {
		case <-in.done:
			if in.err != nil {
				return "", in.err
			}
			return in.id, nil
		case <-ctx.Done():
			return "", context.Cause(ctx)
		}
	}
	in := &idem{done: make(chan struct{})}
	r.keys[key] = in
	r.mu.Unlock()

	in.id, in.err = create()
	if in.err != nil {
		r.mu.Lock()
		delete(r.keys, key)
		r.mu.Unlock()
	}
	close(in.done)
	return in.id, in.err
}
