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
}

// Ladder runs a kernel's staged kill once and lets any number of callers wait for the end,
// the shape every transport's Kernel.Kill shares. The zero value is not usable: set Ended
// (closed once the kernel's end is confirmed, by its reaping, never by a signal call's
// return) and Steps before the first Kill.
type Ladder struct {
	// Ended is closed when the kernel has ended.
	Ended <-chan struct{}
	// Steps are the rungs, in order; the ladder stops climbing once Ended is closed.
	Steps []Step
	// Finished, when set, is what Kill waits for instead of Ended: closed once the kernel's
	// resources are released too (its output drained, a remote sweep done).
	Finished <-chan struct{}

	once sync.Once
}

// Kill starts the ladder (once, whoever calls and however often) and waits for Finished
// (or Ended) or ctx. When ctx ends first it returns an error naming what (e.g. "local kernel 123") and
// ctx's cause; the ladder goes on climbing.
func (l *Ladder) Kill(ctx context.Context, what string) error {
	l.once.Do(func() { go l.climb() })
	done := l.Finished
	if done == nil {
		done = l.Ended
	}
	select {
	case <-done:
		return nil
	default:
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kill %s: %w", what, context.Cause(ctx))
	}
}

func (l *Ladder) climb() {
	for _, s := range l.Steps {
		select {
		case <-l.Ended:
			return
		default:
		}
		s.Act()
		if s.Grace <= 0 {
			continue
		}
		t := time.NewTimer(s.Grace)
		select {
		case <-l.Ended:
			t.Stop()
			return
		case <-t.C:
		}
	}
}
