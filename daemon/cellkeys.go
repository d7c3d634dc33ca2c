package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/store"
)

// A cell request with an Idempotency-Key runs at most once, across retries and daemon
// restarts: its record (store.Cell) is kept before its execute is sent, names its job
// while it runs, and holds its settled reply once it ends. A retry of the key answers
// from the record: the stored reply, the running job's wait, or "unknown" when the cell
// was sent to a kernel that is gone (it may have run; it is never sent again). After a
// restart the daemon drives each cell still running in its record again on the resumed
// kernel (controller.Session.ExecuteCell), which answers a cell it ran with its done,
// keeps running one it runs, and runs one it never got.

// keyedCell runs the cell of key, or answers it from its record: a wait of its job in
// this daemon, or a reply (stored, or the state the record says).
func (s *Server) keyedCell(ctx context.Context, e *entry, key, code string, budget, timeout time.Duration, sink controller.Sink) (controller.JobWait, *api.CellReply, error) {
	rec, ok, err := s.store.CellOf(e.id, key)
	if err != nil {
		return controller.JobWait{}, nil, err
	}
	if ok {
		if rec.Code != code {
			return controller.JobWait{}, nil, &api.Error{Status: http.StatusConflict, Code: api.CodeConflict,
				Message: fmt.Sprintf("idempotency key %q names another cell of this session: a key is for one cell", key)}
		}
		return s.answerKeyed(ctx, e, rec, budget)
	}
	id := e.sess.NextCellID()
	rec = store.Cell{Key: key, Cell: id, Code: code, State: store.CellRunning, Epoch: e.epoch}
	if err := s.store.PutCell(e.id, rec); err != nil {
		return controller.JobWait{}, nil, fmt.Errorf("cell of idempotency key %q not run: %w", key, err)
	}
	jw, err := e.sess.RunCell(ctx, code, controller.CellOptions{ID: id, Budget: budget, Timeout: timeout, Sink: sink})
	if err != nil {
		// Not sent: a retry may run it.
		if derr := s.store.PutCell(e.id, store.Cell{Key: key, Cell: id, Code: code, State: store.CellUnknown, Epoch: e.epoch}); derr != nil {
			s.log.Warn("recording a cell not sent", "session", e.id, "key", key, "err", derr)
		}
		return controller.JobWait{}, nil, err
	}
	rec.Job = jw.Outcome.Job().String()
	s.keepCell(e, rec, jw)
	return jw, nil, nil
}

// answerKeyed answers a retry of rec's key.
func (s *Server) answerKeyed(ctx context.Context, e *entry, rec store.Cell, budget time.Duration) (controller.JobWait, *api.CellReply, error) {
	switch rec.State {
	case store.CellSettled:
		var reply api.CellReply
		if err := json.Unmarshal(rec.Reply, &reply); err != nil {
			return controller.JobWait{}, nil, fmt.Errorf("stored reply of idempotency key %q: %w", rec.Key, err)
		}
		return controller.JobWait{}, &reply, nil
	case store.CellRunning:
		if id, ok := e.keyedJob(rec.Key); ok {
			if jw, err := e.sess.WaitJob(ctx, id, budget); err == nil {
				return jw, nil, nil
			}
		}
		// Sent by an earlier daemon and not yet driven again (its kernel is being
		// reattached): ask again later.
		return controller.JobWait{}, &api.CellReply{State: "backgrounded", Job: rec.Job, Output: api.Output{Text: ""}}, nil
	}
	return controller.JobWait{}, &api.CellReply{State: store.CellUnknown, Job: rec.Job, Output: api.Output{Text: ""},
		Error: &api.Error{Status: http.StatusOK, Code: api.CodeUnknown, Message: fmt.Sprintf("cell of idempotency key %q: it was sent to a kernel that is gone; whether it ran is unknown, and it is not run again", rec.Key)}}, nil
}

// keepCell notes rec's job, then records its settled reply once the job ends.
//
// The job is this daemon's, so it is kept in memory (a retry in this daemon waits on it);
// the store gets it with the reply, sparing every keyed cell one fsync.
func (s *Server) keepCell(e *entry, rec store.Cell, jw controller.JobWait) {
	e.mu.Lock()
	if e.keyed == nil {
		e.keyed = map[string]jobs.ID{}
	}
	e.keyed[rec.Key] = jw.Outcome.Job()
	e.mu.Unlock()
	go func() {
		if _, settled := jw.Outcome.(jobs.Settled); !settled {
			var err error
			if jw, err = e.sess.WaitJob(context.Background(), jw.Outcome.Job(), maxBudget); err != nil {
				return // the job is gone with its session
			}
			if _, settled := jw.Outcome.(jobs.Settled); !settled {
				return
			}
		}
		if errors.Is(jw.Err, controller.ErrDetached) || errors.Is(jw.Err, controller.ErrClosed) {
			return // the daemon let the kernel go: the next one drives the cell again
		}
		reply, err := json.Marshal(replyOf(e, jw))
		if err == nil {
			rec.State, rec.Reply = store.CellSettled, reply
			err = s.store.PutCell(e.id, rec)
		}
		if err != nil {
			s.log.Warn("recording a keyed cell's reply", "session", e.id, "key", rec.Key, "err", err)
		}
	}()
}

// redrive drives again, once the session's kernel is reached, each keyed cell an earlier
// daemon sent and never saw end: on the resumed kernel it runs at most once; with a fresh
// kernel (the old one gone) each is unknown.
func (s *Server) redrive(e *entry) {
	cells, err := s.store.Cells(e.id)
	if err != nil {
		s.log.Warn("reading the session's keyed cells", "session", e.id, "err", err)
		return
	}
	pending := slices.DeleteFunc(cells, func(c store.Cell) bool {
		return c.State != store.CellRunning || c.Epoch >= e.epoch
	})
	if len(pending) == 0 {
		return
	}
	for e.sess.Reattaching() {
		select {
		case <-e.sess.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	resumed := e.sess.Origin().Resumed
	for _, c := range pending {
		if !resumed {
			c.State = store.CellUnknown
			if err := s.store.PutCell(e.id, c); err != nil {
				s.log.Warn("recording a keyed cell unknown", "session", e.id, "key", c.Key, "err", err)
			}
			continue
		}
		jw, err := e.sess.ExecuteCell(context.Background(), c.Cell, c.Code, 0, nil)
		if err != nil {
			s.log.Warn("driving a keyed cell again", "session", e.id, "key", c.Key, "err", err)
			continue // kept running in the record: the next daemon tries again
		}
		c.Job, c.Epoch = jw.Outcome.Job().String(), e.epoch
		e.addJob(jw.Outcome.Job())
		s.keepCell(e, c, jw)
	}
}

// keyedJob is the job of the keyed cell of key this daemon runs, if it does.
func (e *entry) keyedJob(key string) (jobs.ID, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	id, ok := e.keyed[key]
	return id, ok
}
