package jobs

import "time"

// Clock is the time source of a Table: when jobs start and end, and how Wait waits for a
// deadline. Tests supply a fake; nil in TableOptions means the real clock.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives once d has passed (at once for d <= 0).
	After(d time.Duration) <-chan time.Time
}

// realClock is the wall clock.
type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
