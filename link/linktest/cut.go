package linktest

import (
	"context"
	"net"
	"sync"
	"sync/atomic"

	"github.com/kennel-dev/kennel/link"
)

// Cut says where one connection is cut: after Read bytes read or Write bytes written,
// whichever comes first (mid-frame, mid-hello, wherever the count falls); a negative
// count never cuts that direction.
type Cut struct{ Read, Write int }

// Cutting is a Dialer over base that cuts the i-th connection it makes at cuts[i]; the
// connections after the last cut are whole.
func Cutting(base link.Dialer, cuts []Cut) link.Dialer {
	var mu sync.Mutex
	i := 0
	return func(ctx context.Context) (net.Conn, error) {
		c, err := base(ctx)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		if i >= len(cuts) {
			return c, nil
		}
		cc := &cutConn{Conn: c}
		cc.readLimit.Store(int64(cuts[i].Read))
		cc.writeLimit.Store(int64(cuts[i].Write))
		i++
		return cc, nil
	}
}

// cutConn closes its connection once its read or write limit is reached.
type cutConn struct {
	net.Conn
	readLimit, writeLimit atomic.Int64
}

func (c *cutConn) Read(p []byte) (int, error) {
	lim := int(c.readLimit.Load())
	if lim == 0 {
		c.Conn.Close()
		return 0, net.ErrClosed
	}
	if lim > 0 && len(p) > lim {
		p = p[:lim]
	}
	n, err := c.Conn.Read(p)
	if lim > 0 {
		c.readLimit.Add(-int64(n))
	}
	return n, err
}

func (c *cutConn) Write(p []byte) (int, error) {
	lim := int(c.writeLimit.Load())
	if lim >= 0 && len(p) >= lim {
		n, _ := c.Conn.Write(p[:lim])
		c.Conn.Close()
		c.writeLimit.Store(0)
		return n, net.ErrClosed
	}
	n, err := c.Conn.Write(p)
	if lim > 0 {
		c.writeLimit.Add(-int64(n))
	}
	return n, err
}
