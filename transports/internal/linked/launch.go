package linked

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/kennel-dev/kennel/link"
)

// Launch is the Dialer of a kernel socket on this machine's file system while its kernel
// starts. Until Started is called, a socket that is not there yet or not listening yet is
// retried (not ErrGone) for as long as exited stays open (the kernel has not ended);
// afterwards it is link.DialUnix's: no socket proves the kernel gone.
type Launch struct {
	sock    string
	exited  <-chan struct{}
	started atomic.Bool
}

// NewLaunch returns the launch dialer of sock for a kernel whose end closes exited.
func NewLaunch(sock string, exited <-chan struct{}) *Launch {
	return &Launch{sock: sock, exited: exited}
}

// Started ends the launch: from now on no socket is proof.
func (l *Launch) Started() { l.started.Store(true) }

// Dial is the link.Dialer.
func (l *Launch) Dial(ctx context.Context) (net.Conn, error) {
	c, err := link.DialUnix(l.sock)(ctx)
	if err != nil && !l.started.Load() && errors.Is(err, link.ErrGone) {
		select {
		case <-l.exited:
		default:
			return nil, fmt.Errorf("kernel socket not up yet: %v", err) // retried
		}
	}
	return c, err
}
