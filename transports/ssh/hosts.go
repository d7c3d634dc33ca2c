package ssh

import (
	"context"
	"fmt"
	"sync"
	"time"

	xssh "golang.org/x/crypto/ssh"
	"golang.org/x/sync/singleflight"
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
	// KeepAlive is the interval of keepalive requests on each connection; a connection
	// that misses three in a row is closed. Zero means 15 s.
	KeepAlive time.Duration
	// Python is the interpreter probed and used on hosts when a Spec names none: a name
	// looked up on the remote login shell's PATH, or a remote path. Empty means "python3".
	Python string
}

// Hosts is the ssh side of one controller process: one connection per resolved target,
// shared by every session, probe and staging on that host, and the probe cache. It is
// safe for concurrent use. Close ends every connection.
type Hosts struct {
	opts   HostsOptions
	res    *resolver
	dialer *dialer

	mu     sync.Mutex
	conns  map[string]*xssh.Client
	closed bool
	dials  singleflight.Group

	probes  singleflight.Group
	probeMu sync.Mutex
	cache   map[string]cachedProbe
	now     func() time.Time

	stages singleflight.Group
}

// NewHosts reads the ssh config and returns a Hosts that has connected nowhere yet.
func NewHosts(opts HostsOptions) (*Hosts, error) {
	res, err := newResolver(opts.ConfigFile)
	if err != nil {
		return nil, err
	}
	if opts.KeepAlive == 0 {
		opts.KeepAlive = 15 * time.Second
	}
	if opts.Python == "" {
		opts.Python = "python3"
	}
	h := &Hosts{opts: opts, res: res, conns: map[string]*xssh.Client{}, cache: map[string]cachedProbe{}, now: time.Now}
	h.dialer = &dialer{opts: opts, jumpTo: h.clientFor}
	return h, nil
}

// Resolve resolves "[user@]host[:port]" through the ssh config without connecting.
func (h *Hosts) Resolve(target string) (Target, error) { return h.res.resolve(target) }

// Client returns the connection to target, dialling it if there is none (or the last one
// dropped). Concurrent callers for one target share one dial; each returns when its ctx
// ends, while the dial goes on for the others (bounded by ConnectTimeout).
func (h *Hosts) Client(ctx context.Context, target string) (*xssh.Client, Target, error) {
	t, err := h.res.resolve(target)
	if err != nil {
		return nil, Target{}, err
	}
	c, err := h.clientFor(ctx, t)
	return c, t, err
}

func (h *Hosts) clientFor(ctx context.Context, t Target) (*xssh.Client, error) {
	key := t.Key()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, fmt.Errorf("connect %s: hosts closed: %w", t, ErrUnreachable)
	}
	if c := h.conns[key]; c != nil {
		h.mu.Unlock()
		return c, nil
	}
	h.mu.Unlock()
	ch := h.dials.DoChan(key, func() (any, error) {
		h.mu.Lock()
		if c := h.conns[key]; c != nil {
			h.mu.Unlock()
			return c, nil
		}
		h.mu.Unlock()
		// The dial belongs to every caller that joins it: no one caller's ctx ends it.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ConnectTimeout)
		defer cancel()
		c, err := h.dialer.dial(dctx, t)
		if err != nil {
			return nil, err
		}
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			c.Close()
			return nil, fmt.Errorf("connect %s: hosts closed: %w", t, ErrUnreachable)
		}
		h.conns[key] = c
		h.mu.Unlock()
		go h.watch(key, c)
		return c, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*xssh.Client), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("connect %s: %w: %w", t, context.Cause(ctx), ErrUnreachable)
	}
}

// watch sends keepalives on c and forgets it once it ends (or misses three).
func (h *Hosts) watch(key string, c *xssh.Client) {
	done := make(chan struct{})
	go func() {
		_ = c.Wait()
		close(done)
	}()
	tick := time.NewTicker(h.opts.KeepAlive)
	defer tick.Stop()
	missed := 0
loop:
	for {
		select {
		case <-done:
			break loop
		case <-tick.C:
			reply := make(chan error, 1)
			go func() {
				_, _, err := c.SendRequest("keepalive@openssh.com", true, nil)
				reply <- err
			}()
			select {
			case err := <-reply:
				if err != nil {
					missed = 3
				} else {
					missed = 0
				}
			case <-time.After(h.opts.KeepAlive):
				missed++
			case <-done:
				break loop
			}
			if missed >= 3 {
				c.Close()
			}
		}
	}
	h.forget(key, c)
}

func (h *Hosts) forget(key string, c *xssh.Client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conns[key] == c {
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
	c := h.conns[t.Key()]
	delete(h.conns, t.Key())
	h.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// Close closes every connection. Sessions on them end (their kernels see stdin EOF).
func (h *Hosts) Close() error {
	h.mu.Lock()
	h.closed = true
	conns := h.conns
	h.conns = map[string]*xssh.Client{}
	h.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	return nil
}
