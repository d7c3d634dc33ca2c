package transports

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Step is one rung of a staged kill: Act (close stdin, signal TERM, signal KILL, ...), then
// give the kernel Grace to end before the next rung. A Grace of zero or less goes on at once.
type Step struct {
	Act   func()
	Grace time.Duration
	// Live runs Act only while the end has not been seen, and holds the end from being
	// seen while Act runs: for a quick act that must not outlive the kernel (a signal to
	// a group whose id is free for reuse once its leader is reaped).
	Live bool
}

// WatchSpec says how a Watch sees and handles one kernel's end.
type WatchSpec struct {
	// What names the kernel in Kill's errors ("local kernel 123").
	What string
	// Steps are Kill's rungs, in order; climbing stops once Reap has returned.
	Steps []Step
	// Reap blocks until the kernel has ended (confirmed by its reaping, never by a signal
	// call's return) and says how. It calls seen the moment it sees the end, which
	// answers whether Kill was called before; a Reap that does not call it has the end
	// seen when it returns. Exit.Killed is that answer, whatever Reap returns in it.
	// Required.
	Reap func(seen func() (killed bool)) (Exit, error)
	// Release, when set, runs after Reap with its result: it releases what the kernel
	// still holds (its output drained, its container removed, its host swept) and
	// returns the error Wait reports. Nil keeps Reap's error.
	Release func(Exit, error) error
}

// Watch keeps one kernel's end: the bookkeeping of Kernel.Kill and Kernel.Wait every
// transport shares. It runs the reap once, climbs the kill's rungs once whoever calls
// Kill and however often, and gives every Wait the same result.
type Watch struct {
	spec WatchSpec
	once sync.Once // starts the climb

	mu         sync.Mutex
	killCalled bool // Kill was called before the end was seen
	seen       bool // the end has been seen: killCalled is final

	ended    chan struct{} // closed once Reap returned: exit is set
	finished chan struct{} // closed once Release returned: err is final
	exit     Exit
	err      error
}

// NewWatch starts watching: it runs s.Reap, then s.Release, on a goroutine of its own.
func NewWatch(s WatchSpec) *Watch {
	w := &Watch{spec: s, ended: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		exit, err := s.Reap(w.see)
		exit.Killed = w.see()
		w.exit, w.err = exit, err
		close(w.ended)
		if s.Release != nil {
			w.err = s.Release(exit, err)
		}
		close(w.finished)
	}()
	return w
}

// see marks the end as seen and reports whether Kill was called before it.
func (w *Watch) see() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = true
	return w.killCalled
}

// Kill starts the rungs (once) and waits until the kernel has ended and been released,
// or ctx ends: then it returns an error naming the kernel and ctx's cause, and the rungs
// go on. Once the end was seen it reports success as soon as the release is done.
func (w *Watch) Kill(ctx context.Context) error {
	w.mu.Lock()
	w.killCalled = w.killCalled || !w.seen
	w.mu.Unlock()
	w.once.Do(func() { go w.climb() })
	select {
	case <-w.finished:
		return nil
	default:
	}
	select {
	case <-w.finished:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kill %s: %w", w.spec.What, context.Cause(ctx))
	}
}

func (w *Watch) climb() {
	for _, s := range w.spec.Steps {
		select {
		case <-w.ended:
			return
		default:
		}
		if s.Live {
			w.mu.Lock()
			if !w.seen {
				s.Act()
			}
			w.mu.Unlock()
		} else {
			s.Act()
		}
		select {
		case <-w.ended:
			return
		case <-time.After(s.Grace):
		}
	}
}

// Wait blocks until the kernel has ended and been released and reports how it ended.
func (w *Watch) Wait() (Exit, error) {
	<-w.finished
	return w.exit, w.err
}

// Ended is closed once the kernel's end has been seen (Reap returned), before the
// release.
func (w *Watch) Ended() <-chan struct{} { return w.ended }

// Exit returns how the kernel ended once its end has been seen (it waits for Ended): the
// Exit Wait returns, without waiting for the release.
func (w *Watch) Exit() Exit {
	<-w.ended
	return w.exit
}
