package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/jobs"
)

// handleReadCell reads a cell by id without waiting: its reply, settled once it ended
// (the reply the cell's own request would have had), else state "running" with its
// output so far.
func (s *Server) handleReadCell(w http.ResponseWriter, r *http.Request, e *entry) {
	id := r.PathValue("cell")
	jw, err := e.sess.ReadCell(id)
	if err != nil {
		writeError(w, fmt.Errorf("cell %q: %w", id, errNotFound))
		return
	}
	reply := replyOf(e, jw)
	if _, ok := jw.Outcome.(jobs.Detached); ok {
		reply.State = "running"
	}
	writeJSON(w, http.StatusOK, reply)
}

// handleEvents streams the session's events (controller.Session.Subscribe) as
// newline-delimited JSON until the client goes or the session ends.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request, e *entry) {
	sub := e.sess.Subscribe()
	defer sub.Close()
	flush := startNDJSON(w)
	flush()
	enc := json.NewEncoder(w)
	for {
		select {
		case <-r.Context().Done():
			return
		case <-e.sess.Done():
			return
		case <-sub.Ready():
		}
		for _, ev := range sub.Next() {
			if enc.Encode(toEvent(ev)) != nil {
				return // the client is gone
			}
		}
		flush()
	}
}

// toEvent is an event's API view.
func toEvent(ev controller.Event) api.SessionEvent {
	out := api.SessionEvent{Seq: ev.Seq, Type: ev.Type, At: ev.At.UnixMilli(), CellID: ev.Cell, State: ev.State, Dropped: ev.Dropped}
	if ev.Type == controller.EventCell || ev.Type == controller.EventJob {
		out.Job, out.End = ev.Job.String(), toJobEnd(ev.End)
	}
	if c := ev.Result; c != nil {
		out.Cell = toCell(c)
	}
	if ev.Err != nil {
		out.Error = toAPI(ev.Err)
	}
	if ev.Type == controller.EventKernel && ev.PID > 0 {
		pid := ev.PID
		out.PID = &pid
	}
	return out
}
