package controller

import (
	"sync"
	"time"

	"github.com/kennel-dev/kennel/jobs"
)

// The types of an Event.
const (
	// EventCell: a cell run as a job (ExecuteWait, RunCell) ended, once per cell.
	EventCell = "cell"
	// EventJob: a shell job (RunJob) ended, once per job.
	EventJob = "job"
	// EventKernel: the session's kernel changed state (KernelRunning, KernelEnded,
	// KernelReattaching).
	EventKernel = "kernel"
	// EventDropped: a subscriber fell behind by more than its buffer; Dropped counts the
	// events it missed (read their cells and jobs by id).
	EventDropped = "dropped"
)

// The states of an EventKernel event.
const (
	KernelRunning     = "running"     // a kernel said hello (a fresh one, or one reattached)
	KernelEnded       = "ended"       // the kernel ended; the next cell starts a fresh one
	KernelReattaching = "reattaching" // its link is out of reach: reached for again
)

// Event is one change of a session a subscriber is told of (Session.Subscribe).
type Event struct {
	// Seq numbers the session's events from 1, in the order they were published.
	Seq uint64
	// Type is EventCell, EventJob, EventKernel or EventDropped.
	Type string
	// At is when it was published.
	At time.Time
	// Cell is the cell's id (EventCell).
	Cell string
	// Job is the id of the ended job (EventCell: the cell's job; EventJob).
	Job jobs.ID
	// End is how the job ended (EventCell, EventJob).
	End jobs.End
	// Result is how the cell ended when the kernel answered it (EventCell); nil when it
	// ended without its own end (Err says why).
	Result *CellResult
	// Err says why a cell or job ended without its own end, or why a kernel ended.
	Err error
	// State is the kernel's new state (EventKernel); PID its pid when running.
	State string
	PID   int
	// Dropped counts the events a subscriber missed (EventDropped).
	Dropped uint64
}

// maxSubscriberQueue bounds the events waiting for one subscriber.
const maxSubscriberQueue = 4096

// hub fans a session's events out to its subscribers; publish never blocks.
type hub struct {
	mu   sync.Mutex
	seq  uint64
	subs map[*Subscription]struct{}
}

// Subscription is one subscriber's queue of a session's events (Session.Subscribe).
type Subscription struct {
	h *hub
	// Ready has a value whenever Next has events to take.
	ready chan struct{}

	mu      sync.Mutex
	queue   []Event
	dropped uint64
	closed  bool
}

// Subscribe starts a queue of the session's events from now on: every cell run as a
// job that ends, every shell job that ends, every change of the kernel's state. A
// subscriber that falls more than 4096 events behind gets one EventDropped in their
// place. Close it when done.
func (s *Session) Subscribe() *Subscription {
	h := &s.events
	sub := &Subscription{h: h, ready: make(chan struct{}, 1)}
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[*Subscription]struct{}{}
	}
	h.subs[sub] = struct{}{}
	h.mu.Unlock()
	return sub
}

// Ready has a value whenever Next would return events; it is never closed.
func (sub *Subscription) Ready() <-chan struct{} { return sub.ready }

// Next takes the events queued so far, in order (none when there are none).
func (sub *Subscription) Next() []Event {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	evs := sub.queue
	sub.queue = nil
	return evs
}

// Close ends the subscription; later events are not queued.
func (sub *Subscription) Close() {
	sub.h.mu.Lock()
	delete(sub.h.subs, sub)
	sub.h.mu.Unlock()
	sub.mu.Lock()
	sub.closed = true
	sub.queue = nil
	sub.mu.Unlock()
}

func (sub *Subscription) push(ev Event) {
	sub.mu.Lock()
	if sub.closed {
		sub.mu.Unlock()
		return
	}
	if len(sub.queue) >= maxSubscriberQueue {
		if sub.dropped == 0 {
			// The last slot says how many went missing from here on.
			sub.queue[len(sub.queue)-1] = Event{Seq: sub.queue[len(sub.queue)-1].Seq, Type: EventDropped, At: ev.At}
			sub.dropped = 1
		}
		sub.dropped++
		sub.queue[len(sub.queue)-1].Dropped = sub.dropped
		sub.mu.Unlock()
		return
	}
	sub.dropped = 0
	sub.queue = append(sub.queue, ev)
	sub.mu.Unlock()
	select {
	case sub.ready <- struct{}{}:
	default:
	}
}

// publish numbers ev and queues it for every subscriber, never blocking.
func (h *hub) publish(ev Event) {
	h.mu.Lock()
	defer h.mu.Unlock() // held while queueing, so every subscriber sees Seq order
	h.seq++
	ev.Seq = h.seq
	ev.At = time.Now()
	for sub := range h.subs {
		sub.push(ev)
	}
}
