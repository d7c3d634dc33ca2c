package ssh

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	xssh "golang.org/x/crypto/ssh"
	"golang.org/x/sync/singleflight"

	"github.com/kennel-dev/kennel/transports"
)

// HostsOptions configures a Hosts. Every zero value is documented and usable.
type HostsOptions struct {
	// ConfigFile is the ssh config read for User, Port, HostName, IdentityFile and
	// ProxyJump. Empty means ~/.ssh/config (a missing file is no config); "none" reads
	// none.
	ConfigFile string
	// KnownHosts is the known_hosts file host keys are checked against and unknown ones
	// added to. Empty means ~/.ssh/known_hosts.
	KnownHosts string
	// StrictHostKeys refuses a host whose key is not in KnownHosts (ErrNeedsAuth) instead
	// of adding it (accept-new).
	StrictHostKeys bool
	// AgentSocket is the ssh agent's socket. Empty means $SSH_AUTH_SOCK; "none" asks no
	// agent.
	AgentSocket string
	// KeepAlive is the interval of keepalive requests on each connection. A connection
	// that answers none of them for KeepAliveCount intervals (a reply that is late counts
	// as missing) is closed: a silent peer is noticed within KeepAlive × KeepAliveCount
	// (KeepAliveTimeout), 15 s by default. Zero means 5 s; negative sends none.
	KeepAlive time.Duration
	// KeepAliveCount is how many keepalive intervals a connection may go unanswered.
	// Zero means 3; negative is refused (a *transports.FieldError).
	KeepAliveCount int
	// Python is the interpreter probed and used on hosts when a Spec names none: a name
	// looked up on the remote login shell's PATH, or a remote path. Empty means "python3".
	Python string
}

// Hosts is the ssh side of one controller process: one connection per resolved target,
// shared by every session, probe and staging on that host, and the probe cache (at most
// MaxCachedProbes answers). It is safe for concurrent use. Close ends every connection,
// and every dial and probe in flight.
type Hosts struct {
	opts   HostsOptions
	res    *resolver
	dialer *dialer

	// life ends when Close is called (its cause errHostsClosed): the dials and probes
	// callers share run under it, so none outlives the Hosts.
	life    context.Context
	endLife context.CancelCauseFunc

	mu     sync.Mutex
	conns  map[string]*hostConn
	closed bool
	dials  singleflight.Group

	probes  singleflight.Group
	probeMu sync.Mutex
	cache   probeCache // guarded by probeMu
	now     func() time.Time

	stages singleflight.Group
}

// The keepalive defaults: a request every DefaultKeepAlive, a connection closed after
// DefaultKeepAliveCount unanswered intervals (15 s).
const (
	DefaultKeepAlive      = 5 * time.Second
	DefaultKeepAliveCount = 3
)

// keepaliveRequest is OpenSSH's own keepalive: any answer (even a refusal) is one.
const keepaliveRequest = "keepalive@openssh.com"

// NewHosts reads the ssh config and returns a Hosts that has connected nowhere yet.
// Options it cannot use are refused with a *transports.FieldError (errdefs.ErrInvalidArgument).
func NewHosts(opts HostsOptions) (*Hosts, error) {
	if opts.KeepAliveCount < 0 {
		return nil, fmt.Errorf("new hosts: %w", &transports.FieldError{Field: "HostsOptions.KeepAliveCount", Reason: fmt.Sprintf("%d is negative", opts.KeepAliveCount)})
	}
	res, err := newResolver(opts.ConfigFile)
	if err != nil {
		return nil, err
	}
	opts.KeepAlive = cmp.Or(opts.KeepAlive, DefaultKeepAlive)
	opts.KeepAliveCount = cmp.Or(opts.KeepAliveCount, DefaultKeepAliveCount)
	opts.Python = cmp.Or(opts.Python, "python3")
	h := &Hosts{opts: opts, res: res, conns: map[string]*hostConn{}, now: time.Now}
	h.life, h.endLife = context.WithCancelCause(context.Background())
	h.dialer = &dialer{opts: opts, jumpTo: h.clientFor}
	return h, nil
}

// KeepAliveTimeout is how long a connection may go without answering a keepalive before
// it is closed (KeepAlive × KeepAliveCount, as resolved): a peer that goes silent is
// noticed within it. Zero when keepalives are off.
func (h *Hosts) KeepAliveTimeout() time.Duration {
	if h.opts.KeepAlive < 0 {
		return 0
	}
	return h.opts.KeepAlive * time.Duration(h.opts.KeepAliveCount)
}

// Resolve resolves "[user@]host[:port]" through the ssh config without connecting.
func (h *Hosts) Resolve(target string) (Target, error) { return h.res.resolve(target) }

// Client returns the connection to target, dialling it if there is none (or the last one
// dropped). Concurrent callers for one target share one dial; each returns when its ctx
// ends, while the dial goes on for the others (bounded by ConnectTimeout, ended by
// Close).
func (h *Hosts) Client(ctx context.Context, target string) (*xssh.Client, Target, error) {
	t, err := h.res.resolve(target)
	if err != nil {
		return nil, Target{}, err
	}
	c, err := h.clientFor(ctx, t)
	return c, t, err
}

func (h *Hosts) clientFor(ctx context.Context, t Target) (*xssh.Client, error) {
	hc, err := h.connFor(ctx, t)
	if err != nil {
		return nil, err
	}
	return hc.c, nil
}

// live returns the connection for key if there is one that has not ended; an ended one
// is forgotten. h.mu is held.
func (h *Hosts) live(key string) *hostConn {
	hc := h.conns[key]
	if hc != nil && hc.ended() {
		delete(h.conns, key)
		hc = nil
	}
	return hc
}

// connFor returns the live connection to t, dialling one if there is none (or the last
// one ended).
func (h *Hosts) connFor(ctx context.Context, t Target) (*hostConn, error) {
	key := t.Key()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, fmt.Errorf("connect %s: hosts closed: %w", t, ErrUnreachable)
	}
	if hc := h.live(key); hc != nil {
		h.mu.Unlock()
		return hc, nil
	}
	h.mu.Unlock()
	ch := h.dials.DoChan(key, func() (any, error) {
		h.mu.Lock()
		if hc := h.live(key); hc != nil {
			h.mu.Unlock()
			return hc, nil
		}
		h.mu.Unlock()
		// The dial belongs to every caller that joins it: no one caller's ctx ends it.
		dctx, cancel := h.detach(ctx, ConnectTimeout)
		defer cancel()
		c, err := h.dialer.dial(dctx, t)
		if err != nil {
			return nil, err
		}
		hc := newHostConn(c, t)
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			hc.close()
			return nil, fmt.Errorf("connect %s: hosts closed: %w", t, ErrUnreachable)
		}
		h.conns[key] = hc
		h.mu.Unlock()
		go h.watch(key, hc)
		return hc, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*hostConn), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("connect %s: %w: %w", t, context.Cause(ctx), ErrUnreachable)
	}
}

// watch sends keepalives on hc until it ends, closes it once none has been answered for
// KeepAliveTimeout, and forgets it once it has ended.
func (h *Hosts) watch(key string, hc *hostConn) {
	defer h.forget(key, hc)
	if h.opts.KeepAlive < 0 {
		<-hc.done
		return
	}
	// One request at a time: a reply that stalls holds the next request back, and counts
	// as missing while it is late.
	answered := make(chan struct{}, 1)
	go func() {
		tick := time.NewTicker(h.opts.KeepAlive)
		defer tick.Stop()
		for {
			select {
			case <-hc.done:
				return
			case <-tick.C:
			}
			if _, _, err := hc.c.SendRequest(keepaliveRequest, true, nil); err != nil {
				return // the connection ended
			}
			select {
			case answered <- struct{}{}:
			default:
			}
		}
	}()
	window := h.KeepAliveTimeout()
	silent := time.NewTimer(window)
	defer silent.Stop()
	for {
		select {
		case <-hc.done:
			return
		case <-answered:
			silent.Reset(window)
		case <-silent.C:
			hc.fail(fmt.Errorf("%w for %s", ErrKeepalive, window))
			<-hc.done
			return
		}
	}
}

func (h *Hosts) forget(key string, hc *hostConn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conns[key] == hc {
		delete(h.conns, key)
	}
}

// Drop closes the connection to target, if any; the next use dials again.
func (h *Hosts) Drop(target string) {
	t, err := h.res.resolve(target)
	if err != nil {
		return
	}
	h.mu.Lock()
	hc := h.conns[t.Key()]
	delete(h.conns, t.Key())
	h.mu.Unlock()
	if hc != nil {
		hc.close()
	}
}

// detach returns the context of work every caller that joins it shares (a dial, a
// probe): ctx's values without its cancellation, ended after d or by Close (the cause
// then is errHostsClosed). The returned func releases it.
func (h *Hosts) detach(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	shared, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(h.life, func() { cancel(context.Cause(h.life)) })
	bounded, cancelBound := context.WithTimeout(shared, d)
	return bounded, func() {
		cancelBound()
		stop()
		cancel(nil)
	}
}

// errHostsClosed is why the dials and probes in flight at Close end.
var errHostsClosed = errors.New("hosts closed")

// Close closes every connection and ends every dial and probe in flight: their callers
// get ErrUnreachable errors (and unreachable probes) that say the hosts were closed.
// Sessions on the connections end (their kernels see stdin EOF). After Close, whatever
// needs a connection fails with ErrUnreachable.
func (h *Hosts) Close() error {
	h.endLife(errHostsClosed)
	h.mu.Lock()
	h.closed = true
	conns := h.conns
	h.conns = map[string]*hostConn{}
	h.mu.Unlock()
	for _, hc := range conns {
		hc.close()
	}
	return nil
}

// errClosedHere is the end of a connection kennel closed itself (Drop, Close).
var errClosedHere = errors.New("closed by kennel")

// hostConn is one connection of a Hosts and, once it has ended, why.
type hostConn struct {
	c      *xssh.Client
	target Target
	done   chan struct{} // closed once the connection has ended; cause is set by then

	mu    sync.Mutex
	cause error
}

func newHostConn(c *xssh.Client, t Target) *hostConn {
	hc := &hostConn{c: c, target: t, done: make(chan struct{})}
	go func() {
		err := c.Wait()
		if err == nil {
			err = io.EOF
		}
		hc.setCause(err)
		close(hc.done)
	}()
	return hc
}

// setCause records why the connection ends; the first cause wins.
func (hc *hostConn) setCause(err error) {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if hc.cause == nil {
		hc.cause = err
	}
}

// fail ends the connection for cause.
func (hc *hostConn) fail(cause error) {
	hc.setCause(cause)
	hc.c.Close()
}

// close ends the connection as kennel's own doing.
func (hc *hostConn) close() { hc.fail(errClosedHere) }

func (hc *hostConn) ended() bool {
	select {
	case <-hc.done:
		return true
	default:
		return false
	}
}

// lost returns the error of a connection that has ended: it names the connection and
// its fault, and matches ErrConnectionLost (and ErrUnreachable). Only after done.
func (hc *hostConn) lost() error {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return &connLostError{target: hc.target, cause: hc.cause}
}

// connLostError is a connection that ended while it was in use.
type connLostError struct {
	target Target
	cause  error
}

func (e *connLostError) Error() string {
	name := e.target.String()
	if e.target.HostName != e.target.Name {
		name += " (" + e.target.Addr() + ")"
	}
	return "ssh connection " + name + ": connection lost: " + e.cause.Error()
}

// Unwrap gives the class and the fault, but never io.EOF: a reader that stops at io.EOF
// must not take a lost connection for the clean end of a stream.
func (e *connLostError) Unwrap() []error {
	if errors.Is(e.cause, io.EOF) {
		return []error{ErrConnectionLost}
	}
	return []error{ErrConnectionLost, e.cause}
}
