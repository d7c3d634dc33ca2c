package workspaces

import (
	"sync"
	"sync/atomic"
	"time"
)

// progressTick is how often a progress function is called.
const progressTick = 100 * time.Millisecond

// reporter calls a progress function on a ticker with counts that workers add to. A nil
// function makes every method a no-op.
type reporter struct {
	fn      func(Progress)
	done    atomic.Int64
	mu      sync.Mutex
	phase   string
	total   int
	quit    chan struct{}
	ended   chan struct{}
	stopped sync.Once
}

// startProgress starts calling fn every progressTick until stop.
func startProgress(fn func(Progress), phase string) *reporter {
	r := &reporter{fn: fn, phase: phase}
	if fn == nil {
		return r
	}
	r.quit, r.ended = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(r.ended)
		t := time.NewTicker(progressTick)
		defer t.Stop()
		for {
			select {
			case <-r.quit:
				return
			case <-t.C:
				r.fn(r.snapshot())
			}
		}
	}()
	return r
}

func (r *reporter) snapshot() Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Progress{Phase: r.phase, Done: int(r.done.Load()), Total: r.total}
}

// set starts a new phase of total paths.
func (r *reporter) set(phase string, total int) {
	if r.fn == nil {
		return
	}
	r.mu.Lock()
	r.phase, r.total = phase, total
	r.done.Store(0)
	r.mu.Unlock()
}

// add counts n more paths done.
func (r *reporter) add(n int) {
	if r.fn != nil {
		r.done.Add(int64(n))
	}
}

// stop ends the ticker and reports the last counts once. Safe to call more than once.
func (r *reporter) stop() {
	if r.fn == nil {
		return
	}
	r.stopped.Do(func() {
		close(r.quit)
		<-r.ended
		r.fn(r.snapshot())
	})
}
