package link

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// Dialer makes one connection to a kernel's socket. An error wrapping ErrGone says no
// kernel is there (proof, not a failure to reach one): the link ends. Any other error is
// retried with backoff.
type Dialer func(ctx context.Context) (net.Conn, error)

// DialUnix is the Dialer of a kernel socket on this machine's file system. A missing
// socket and a socket nobody listens on (ENOENT, ECONNREFUSED) are ErrGone.
func DialUnix(path string) Dialer {
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", path)
		if err != nil && (errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)) {
			return nil, fmt.Errorf("%w: %w", ErrGone, err)
		}
		return c, err
	}
}

// Backoff is how a dropped link is reattached: Tries attempts, waiting First before the
// first and doubling up to Max. The zero value is the protocol's: 50 ms doubling to 2 s,
// 40 tries.
type Backoff struct {
	First, Max time.Duration
	Tries      int
}

func (b Backoff) resolved() Backoff {
	if b.First <= 0 {
		b.First = 50 * time.Millisecond
	}
	if b.Max <= 0 {
		b.Max = 2 * time.Second
	}
	if b.Tries <= 0 {
		b.Tries = 40
	}
	return b
}

// delay is the wait before try i (from 0).
func (b Backoff) delay(i int) time.Duration {
	d := b.First
	for ; i > 0 && d < b.Max; i-- {
		d *= 2
	}
	return min(d, b.Max)
}
