package link

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Dialer makes one connection to a kernel's socket. An error wrapping ErrGone says no
// kernel is there (proof, not a failure to reach one): the link ends. Any other error is
// retried with backoff.
type Dialer func(ctx context.Context) (net.Conn, error)

// maxSunPath is the size of sun_path on Linux, its NUL included.
const maxSunPath = 108

// DialUnix is the Dialer of a kernel socket on this machine's file system. A missing
// socket and a socket nobody listens on (ENOENT, ECONNREFUSED) are ErrGone. A path too
// long for sun_path is reached through its directory: the directory is opened and the
// socket dialed as /proc/self/fd/<fd>/<name>, so a deep state directory still works.
func DialUnix(path string) Dialer {
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		var c net.Conn
		var err error
		if len(path) < maxSunPath {
			c, err = d.DialContext(ctx, "unix", path)
		} else {
			c, err = dialThroughDir(ctx, &d, path)
		}
		if err != nil && (errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)) {
			return nil, fmt.Errorf("%w: %w", ErrGone, err)
		}
		return c, err
	}
}

func dialThroughDir(ctx context.Context, d *net.Dialer, path string) (net.Conn, error) {
	dir, name := filepath.Split(path)
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: &os.PathError{Op: "open", Path: dir, Err: err}}
	}
	defer unix.Close(fd)
	short := fmt.Sprintf("/proc/self/fd/%d/%s", fd, name)
	if len(short) >= maxSunPath {
		return nil, fmt.Errorf("dial %s: the socket's name is too long: %w", path, syscall.ENAMETOOLONG)
	}
	return d.DialContext(ctx, "unix", short)
}

// Backoff is how a dropped link is reattached: Tries attempts, waiting First before the
// first and doubling up to Max. The zero value is the protocol's: 50 ms doubling to 2 s,
// 40 tries.
type Backoff struct {
	First, Max time.Duration
	Tries      int
	// Within bounds the time a reattach keeps trying, from the drop: past it the link
	// gives up (ErrUnreachable) even with tries left. Zero means the sum of the Tries
	// delays (about 75 s with the protocol's backoff): the protocol's 40 tries assume an
	// attempt that fails at once, while one to a partitioned host waits for its connect
	// timeout, and 40 of those would keep a session waiting for minutes.
	Within time.Duration
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
	if b.Within <= 0 {
		for i := range b.Tries {
			b.Within += b.delay(i)
		}
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
