// Package limits is the rule the container transports' option fields share: zero means
// the transport's default, a negative value means none, any other is itself. It serves
// resource limits (memory, CPU, pids, tmpfs sizes) and the timeouts of a first contact
// with an engine, daemon or API server. A size, grace or timeout that is never none has
// its own rule (Positive).
package limits

import (
	"context"
	"time"
)

// Of is v under the rule: def when v is 0, 0 (none) when v is negative, else v.
func Of(v, def int64) int64 {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// Positive is v when it is positive, else def: the rule of a size, grace or timeout that
// is never none (Docker's /tmp, a detached kernel's grace, a pod's pending timeout).
func Positive[T ~int64](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// Context is ctx bounded by d under the rule (def when d is 0; ctx alone when d is
// negative), and its cancel.
func Context(ctx context.Context, d, def time.Duration) (context.Context, context.CancelFunc) {
	if d < 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, time.Duration(Of(int64(d), int64(def))))
}
