package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kennel-dev/kennel/api"
)

// maxIdle bounds the keep-alive connections a Client keeps between calls.
const maxIdle = 64

// idleTimeout is how long an idle connection is kept before it is closed unused.
const idleTimeout = 90 * time.Second

// conn is one HTTP/1.1 connection to the daemon, used by one call at a time.
type conn struct {
	nc     net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	reused bool      // it served a call before this one
	idleAt time.Time // when it went back to the pool
}

// transport makes HTTP/1.1 requests over the daemon's unix socket on the calling
// goroutine: the request is written and the reply read by the caller, with no goroutine
// of the transport's own in between (net/http's Transport hands each request to a writer
// goroutine and each reply from a reader goroutine). A connection whose reply body was
// read to its end goes back to a pool of idle keep-alive connections; any other is
// closed.
type transport struct {
	socket string

	mu   sync.Mutex
	idle []*conn // most recently used last
}

// aLongTimeAgo is a deadline in the past: it makes blocked reads and writes return.
var aLongTimeAgo = time.Unix(1, 0)

// request is one API request: an HTTP/1.1 request to the daemon.
type request struct {
	method string
	// target is the request target: the path, escaped, and its query.
	target string
	// header holds extra header fields (Accept, Idempotency-Key); their names and values
	// are checked before anything is sent.
	header http.Header
	// body, when non-nil, is sent as application/json.
	body []byte
}

// do sends req and returns the reply, whose Body the caller must close. The reply's body
// reads on the caller's goroutine. A request sent on a reused connection that the daemon
// had closed is sent again, once, on a new connection when nothing of it reached the
// daemon (the write failed), or when the request is replayable (a GET, or one with an
// Idempotency-Key) and the connection ended before any byte of the reply. When ctx ends,
// the call returns ctx's cause.
func (t *transport) do(ctx context.Context, req *request) (*http.Response, error) {
	head, err := req.head()
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	for attempt := 0; ; attempt++ {
		cn, err := t.get(ctx)
		if err != nil {
			return nil, err
		}
		resp, retry, err := t.roundTrip(ctx, cn, req, head)
		if err == nil {
			return resp, nil
		}
		if !retry || !cn.reused || attempt > 0 || ctx.Err() != nil {
			return nil, err
		}
	}
}

// head is the request's line and header, ending with the blank line.
func (req *request) head() ([]byte, error) {
	if !validName(req.method) || req.target == "" || strings.ContainsFunc(req.target, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return nil, fmt.Errorf("request %q %q: not a valid request line", req.method, req.target)
	}
	b := make([]byte, 0, 256)
	b = append(b, req.method...)
	b = append(b, ' ')
	b = append(b, req.target...)
	b = append(b, " HTTP/1.1\r\nHost: kennel\r\nUser-Agent: kennel-client\r\n"...)
	for name, values := range req.header {
		if !validName(name) {
			return nil, fmt.Errorf("header field name %q: not a token", name)
		}
		for _, v := range values {
			if !validValue(v) {
				return nil, fmt.Errorf("header field %s: value %q has a control character", name, v)
			}
			b = append(b, name...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	switch {
	case req.body != nil:
		b = append(b, "Content-Type: application/json\r\nContent-Length: "...)
		b = strconv.AppendInt(b, int64(len(req.body)), 10)
		b = append(b, "\r\n"...)
	case req.method != http.MethodGet && req.method != http.MethodHead:
		b = append(b, "Content-Length: 0\r\n"...)
	}
	return append(b, "\r\n"...), nil
}

// validName reports whether name is an HTTP token.
func validName(name string) bool {
	return name != "" && !strings.ContainsFunc(name, func(r rune) bool {
		return r <= ' ' || r >= 0x7f || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r)
	})
}

// validValue reports whether v holds no control character but tab.
func validValue(v string) bool {
	return !strings.ContainsFunc(v, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f })
}

// roundTrip writes the request (head, then body) on cn and reads the reply's head.
// retry reports an error after which the request may be sent again (see do). cn is
// closed on error.
func (t *transport) roundTrip(ctx context.Context, cn *conn, req *request, head []byte) (resp *http.Response, retry bool, err error) {
	stop := context.AfterFunc(ctx, func() { _ = cn.nc.SetDeadline(aLongTimeAgo) })
	fail := func(err error) error {
		stop()
		_ = cn.nc.Close()
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return err
	}
	_, werr := cn.bw.Write(head)
	if werr == nil {
		_, werr = cn.bw.Write(req.body)
	}
	if werr == nil {
		werr = cn.bw.Flush()
	}
	hreq := &http.Request{Method: req.method}
	if werr != nil {
		// A daemon that refused the request early (a body too large) may have replied
		// before it closed: that reply is the answer.
		if resp, err := http.ReadResponse(cn.br, hreq); err == nil {
			resp.Body = &body{rc: resp.Body, cn: cn, t: t, ctx: ctx, stop: stop}
			return resp, false, nil
		}
		return nil, true, fail(werr)
	}
	resp, err = http.ReadResponse(cn.br, hreq)
	if err != nil {
		// The connection ended before the reply began: a keep-alive connection the
		// daemon closed (it shut down, say) as the request went out.
		eof := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		return nil, eof && req.replayable(), fail(err)
	}
	resp.Body = &body{rc: resp.Body, cn: cn, t: t, ctx: ctx, stop: stop, keep: !resp.Close}
	return resp, false, nil
}

// replayable reports whether the request may be sent twice: a GET or HEAD, or a request
// that carries an Idempotency-Key.
func (req *request) replayable() bool {
	switch req.method {
	case http.MethodGet, http.MethodHead:
		return true
	}
	return req.header.Get(api.HeaderIdempotencyKey) != ""
}

// get returns an idle connection, else a new one.
func (t *transport) get(ctx context.Context) (*conn, error) {
	now := time.Now()
	t.mu.Lock()
	for len(t.idle) > 0 {
		cn := t.idle[len(t.idle)-1]
		t.idle = t.idle[:len(t.idle)-1]
		if now.Sub(cn.idleAt) < idleTimeout {
			t.mu.Unlock()
			cn.reused = true
			return cn, nil
		}
		_ = cn.nc.Close()
	}
	t.mu.Unlock()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", t.socket)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, fmt.Errorf("%w at %s: %w", ErrNoDaemon, t.socket, err)
	}
	return &conn{nc: nc, br: bufio.NewReader(nc), bw: bufio.NewWriter(nc)}, nil
}

// put returns cn to the idle pool, or closes it when the pool is full.
func (t *transport) put(cn *conn) {
	cn.idleAt = time.Now()
	t.mu.Lock()
	if len(t.idle) < maxIdle {
		t.idle = append(t.idle, cn)
		cn = nil
	}
	t.mu.Unlock()
	if cn != nil {
		_ = cn.nc.Close()
	}
}

// closeIdle closes the idle connections.
func (t *transport) closeIdle() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, cn := range idle {
		_ = cn.nc.Close()
	}
}

// body is a reply's body: read to its end, it puts its connection back in the pool
// (unless the reply closes it); closed before, it closes the connection.
type body struct {
	rc   io.ReadCloser
	cn   *conn
	t    *transport
	ctx  context.Context
	stop func() bool // unregisters the call's context watch; false once it fired

	mu   sync.Mutex
	done bool // the connection was released
	keep bool // the reply allows the connection to be reused
}

// Read reads the body; when ctx has ended it fails with ctx's cause.
func (b *body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.release(true)
	case err != nil:
		b.release(false)
		if b.ctx.Err() != nil {
			err = context.Cause(b.ctx)
		}
	}
	return n, err
}

// Close releases the connection: to the pool after a body read to its end, else closed.
func (b *body) Close() error {
	b.release(false)
	return nil
}

// release ends the body's use of its connection once.
func (b *body) release(atEOF bool) {
	b.mu.Lock()
	if b.done {
		b.mu.Unlock()
		return
	}
	b.done = true
	b.mu.Unlock()
	// stop reports false when the context watch already set the deadline: the
	// connection cannot be trusted any more.
	if atEOF && b.stop() && b.keep {
		b.t.put(b.cn)
		return
	}
	b.stop()
	_ = b.cn.nc.Close()
}
