package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/output"
	"github.com/kennel-dev/kennel/protocol"
)

const (
	// defaultBudget is how long a cell request waits before the cell detaches.
	defaultBudget = 60 * time.Second
	// maxBudget caps a requested budget.
	maxBudget = 24 * time.Hour
	// maxCodeBody bounds a cell request's body.
	maxCodeBody = protocol.MaxLine
	// maxQueued bounds the streamed output waiting for a slow client; past it output
	// is counted in a "dropped" event (the final reply still carries the bounded output).
	// As large as a detached kernel's outbox (64 MiB), which held the backlog while the
	// daemon read slower than a kernel writes: now that it reads as fast, a client that
	// falls behind for a moment (a loaded host) is held here instead.
	maxQueued = 64 << 20
)

// budgetOf turns a request's budget into a duration.
func budgetOf(ms *int64) time.Duration {
	switch {
	case ms == nil:
		return defaultBudget
	case *ms <= 0:
		return 0
	case *ms > int64(maxBudget/time.Millisecond):
		return maxBudget
	}
	return time.Duration(*ms) * time.Millisecond
}

// wantsNDJSON reports whether the request's Accept asks for a stream.
func wantsNDJSON(r *http.Request) bool {
	accept := r.Header.Get("Accept")
	if accept == "" {
		return false
	}
	for _, part := range strings.Split(accept, ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == api.MediaNDJSON {
			return true
		}
	}
	return false
}

func (s *Server) handleCell(w http.ResponseWriter, r *http.Request, e *entry) {
	var req api.RunCell
	if err := readJSON(w, r, maxCodeBody, &req); err != nil {
		writeError(w, err)
		return
	}
	budget := budgetOf(req.BudgetMS)
	var timeout time.Duration
	if req.TimeoutMS != nil && *req.TimeoutMS > 0 {
		timeout = time.Duration(min(*req.TimeoutMS, int64(maxBudget/time.Millisecond))) * time.Millisecond
	}
	key := r.Header.Get(api.HeaderIdempotencyKey)
	if len(key) > 256 {
		writeError(w, fmt.Errorf("idempotency key: %w: at most 256 bytes", errInvalid))
		return
	}
	var cellID string // the cell's id, told in a detached reply; a keyed cell's is its record's
	if key == "" {
		cellID = e.sess.NextCellID()
	}
	run := func(ctx context.Context, sink controller.Sink) (controller.JobWait, *api.CellReply, error) {
		if key != "" {
			return s.keyedCell(ctx, e, key, req.Code, budget, timeout, sink)
		}
		jw, err := e.sess.RunCell(ctx, req.Code, controller.CellOptions{ID: cellID, Budget: budget, Timeout: timeout, Sink: sink})
		return jw, nil, err
	}
	if !wantsNDJSON(r) {
		jw, stored, err := run(r.Context(), nil)
		switch {
		case err != nil:
			writeError(w, err)
		case stored != nil:
			writeJSON(w, http.StatusOK, stored)
		default:
			reply := s.cellReply(e, jw)
			reply.CellID = cellID
			writeJSON(w, http.StatusOK, reply)
		}
		return
	}
	sink := newQueueSink()
	type result struct {
		jw     controller.JobWait
		stored *api.CellReply
		err    error
	}
	done := make(chan result, 1)
	go func() {
		jw, stored, err := run(r.Context(), sink)
		done <- result{jw, stored, err}
	}()
	flushW := startNDJSON(w)
	enc := json.NewEncoder(w)
	flush := func() {
		for _, ev := range sink.drain() {
			var err error
			if ev.line != nil {
				_, err = w.Write(ev.line)
				freeEventLine(ev.line)
			} else {
				err = enc.Encode(ev.Event)
			}
			if err != nil {
				return // the client is gone; the request's context ends the cell's wait
			}
		}
		flushW()
	}
	for {
		select {
		case <-sink.ready:
			flush()
		case res := <-done:
			flush()
			switch {
			case res.err != nil:
				_ = enc.Encode(api.Event{Type: "error", Error: toAPI(res.err)})
			case res.stored != nil:
				_ = enc.Encode(api.Event{Type: "result", Result: res.stored})
			default:
				reply := s.cellReply(e, res.jw)
				reply.CellID = cellID
				_ = enc.Encode(api.Event{Type: "result", Result: &reply})
			}
			flushW()
			return
		}
	}
}

// cellReply turns a cell's wait into its reply, and counts it.
func (s *Server) cellReply(e *entry, jw controller.JobWait) api.CellReply {
	id := jw.Outcome.Job()
	e.addJob(id)
	reply := replyOf(e, jw)
	if _, ok := jw.Outcome.(jobs.Settled); ok {
		s.accountSettled(e, id, jw.Outcome.SoFar())
		s.metrics.cellsSettled.Inc()
	} else {
		s.metrics.cellsDetached.Inc()
	}
	return reply
}

// replyOf is a cell's wait as its reply.
func replyOf(e *entry, jw controller.JobWait) api.CellReply {
	id := jw.Outcome.Job()
	out := jw.Outcome.SoFar()
	reply := api.CellReply{Job: id.String(), Output: toOutput(readWith(out, e.id, id))}
	switch jw.Outcome.(type) {
	case jobs.Settled:
		reply.State = "settled"
		if c := jw.Cell; c != nil {
			reply.Cell = toCell(c)
			reply.Upgrade = toUpgrade(c.Upgrade)
			if c.Lost != "" {
				lost := c.Lost
				reply.Lost = &lost
			}
		}
		if jw.Err != nil {
			reply.Error = toAPI(jw.Err)
		}
	default:
		reply.State = "backgrounded"
	}
	return reply
}

// toCell is a cell's end as the kernel answered it, in its API view.
func toCell(c *controller.CellResult) *api.Cell {
	out := &api.Cell{ID: c.ID, Status: c.Status, Result: c.Result, Reason: c.Reason, Note: c.Note}
	if c.Error != nil {
		out.Exception = &api.Exception{Name: c.Error.EName, Value: c.Error.EValue, Traceback: c.Error.Traceback}
	}
	return out
}

// readWith names, in a job's bounded output, the route that reads what the job retained
// of it by offset and limit: the notice then says which call reads the bytes it names.
func readWith(r output.Result, session string, job jobs.ID) output.Result {
	if r.Where != "" {
		r.ReadWith = fmt.Sprintf("GET /sessions/%s/jobs/%s/output?offset=&limit= (at most %d bytes a read)", session, job, output.MaxPage)
	}
	return r
}

// toOutput is a bounded output's API view. Its Text is made for this reply (under
// truncation off, up to the job's retained bytes) and kept by no one after it.
func toOutput(r output.Result) api.Output {
	return api.Output{
		Text:         strings.ToValidUTF8(string(r.Kept), "\uFFFD"),
		TotalBytes:   r.TotalBytes,
		TotalLines:   r.TotalLines,
		DroppedBytes: r.DroppedBytes,
		DroppedLines: r.DroppedLines,
		Notice:       r.Notice(),
	}
}

// queueSink queues a cell's output for the streaming reply. The session's reader
// goroutine calls Stream, StreamText and Display, so they never block: past maxQueued
// bytes waiting, output is only counted, and the stream says how much it dropped.
type queueSink struct {
	ready chan struct{}

	mu      sync.Mutex
	events  []queuedEvent
	queued  int
	dropped int64
}

// queuedEvent is one event of the stream: Event, or, when line is set, the event already
// encoded as its NDJSON line (a stream event made from the kernel's own JSON text).
type queuedEvent struct {
	api.Event
	line []byte
}

func newQueueSink() *queueSink { return &queueSink{ready: make(chan struct{}, 1)} }

func (q *queueSink) push(ev queuedEvent, n int) {
	q.mu.Lock()
	if q.queued+n > maxQueued {
		q.dropped += int64(n)
	} else {
		q.events = append(q.events, ev)
		q.queued += n
	}
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// Stream queues text a cell wrote.
func (q *queueSink) Stream(name, text string) {
	q.push(queuedEvent{Event: api.Event{Type: "stream", Name: name, Text: text}}, len(text))
}

// StreamText queues text a cell wrote, as the line encoding/json would make of its
// stream event, with the kernel's JSON form of the text in it when the frame had one
// (nothing escaped again: the hot path of a cell's output).
func (q *queueSink) StreamText(name string, text, quoted []byte) {
	if len(text) == 0 || quoted == nil || (name != protocol.StreamStdout && name != protocol.StreamStderr) {
		q.Stream(name, string(text))
		return
	}
	line := newEventLine(len(streamEventHead) + len(name) + len(streamEventText) + len(quoted) + 2)
	line = append(line, streamEventHead...)
	line = append(line, name...)
	line = append(line, streamEventText...)
	line = append(line, quoted...)
	line = append(line, '}', '\n')
	q.push(queuedEvent{line: line}, len(text))
}

// Stream event lines of the kernel's frames (about 60 KiB each) are pooled: taken by
// StreamText, given back once written.
const eventLineCap = 128 << 10

var eventLines sync.Pool // of *[]byte of capacity eventLineCap

// newEventLine returns an empty line with room for n bytes.
func newEventLine(n int) []byte {
	if n > eventLineCap {
		return make([]byte, 0, n)
	}
	if p, ok := eventLines.Get().(*[]byte); ok {
		return (*p)[:0]
	}
	return make([]byte, 0, eventLineCap)
}

// freeEventLine gives back a line newEventLine made, once it is written.
func freeEventLine(b []byte) {
	if cap(b) == eventLineCap {
		b = b[:0]
		eventLines.Put(&b)
	}
}

// The stream event's line: {"type":"stream","name":NAME,"text":QUOTED}.
const (
	streamEventHead = `{"type":"stream","name":"`
	streamEventText = `","text":`
)

// Display queues a rich value a cell displayed.
func (q *queueSink) Display(data json.RawMessage) {
	q.push(queuedEvent{Event: api.Event{Type: "display", Data: append(json.RawMessage(nil), data...)}}, len(data))
}

// drain takes the queued events, then a "dropped" event when output was dropped after
// them (the queue was full).
func (q *queueSink) drain() []queuedEvent {
	q.mu.Lock()
	defer q.mu.Unlock()
	evs := q.events
	if q.dropped > 0 {
		evs = append(evs, queuedEvent{Event: api.Event{Type: "dropped", Bytes: q.dropped}})
		q.dropped = 0
	}
	q.events, q.queued = nil, 0
	return evs
}

// toUpgrade is an upgrade notice's API view (nil for none).
func toUpgrade(n *controller.UpgradeNotice) *api.Upgrade {
	if n == nil {
		return nil
	}
	return &api.Upgrade{From: n.From, To: n.To, Carried: nonNil(n.Carried), Left: nonNil(n.Left)}
}

// handleUpgrade replaces the session's kernel by one of the daemon's build, carrying its
// namespace's picklable values (controller.Session.Upgrade), stale or not: 200 with what
// was carried, 409 busy when a cell or job runs, 503 when it failed (the old kernel
// serves on).
func (s *Server) handleUpgrade(w http.ResponseWriter, r *http.Request, e *entry) {
	n, err := e.sess.Upgrade(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, toUpgrade(n))
}
