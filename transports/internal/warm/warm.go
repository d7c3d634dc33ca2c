// Package warm keeps ready kernels of one description for a transport's warm pool
// (transports/docker, transports/containerd, transports/kubernetes): it fills the pool in the background, one
// start at a time, drops a ready kernel that ends while it waits, hands each out once,
// and counts what it did (transports.PoolStats). What a ready kernel is, how it starts
// and how it is made a session's are the transport's.
package warm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/transports"
)

// Ready is a kernel a Pool keeps until its hand-out.
type Ready interface {
	// Exited is closed once the kernel ends (it is then dropped from the pool).
	Exited() <-chan struct{}
	// Discard removes what the kernel holds (its container, run directory). It is
	// called once, for a kernel never handed out.
	Discard(ctx context.Context)
	// String names it in the pool's logs.
	String() string
}

// Options configure a Pool.
type Options[R Ready] struct {
	// Kind names the transport in the pool's logs ("docker").
	Kind string
	// Key is the pool's description: what a session's must be for a Take to hand it
	// one of the pool's kernels.
	Key string
	// Size is how many ready kernels to keep, at least 1.
	Size int
	// Start makes one ready kernel; ctx ends when the pool closes.
	Start func(ctx context.Context) (R, error)
	// Logger gets the pool's failures. Nil discards them.
	Logger *slog.Logger
}

// Pool keeps Options.Size ready kernels. It is safe for concurrent use.
type Pool[R Ready] struct {
	o      Options[R]
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	wake   chan struct{}

	mu     sync.Mutex
	ready  []R
	stats  transports.PoolStats
	closed bool
}

// New starts a pool filling in the background.
func New[R Ready](o Options[R]) *Pool[R] {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Pool[R]{o: o, done: make(chan struct{}), wake: make(chan struct{}, 1)}
	p.stats.Size = o.Size
	p.ctx, p.cancel = context.WithCancel(context.Background())
	go p.fill()
	return p
}

// Stats returns what the pool has done so far.
func (p *Pool[R]) Stats() transports.PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Ready = len(p.ready)
	return s
}

// Take returns a ready kernel for a session whose description is key and counts a hit,
// or, with key not the pool's (Options.Key), none ready or the pool closed, counts a miss
// and returns false: the session starts cold.
func (p *Pool[R]) Take(key string) (R, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key == p.o.Key && !p.closed && len(p.ready) > 0 {
		r := p.ready[0]
		p.ready = p.ready[1:]
		select {
		case <-r.Exited(): // ended meanwhile: its watch has let it go
			continue
		default:
		}
		p.stats.Hits++
		p.poke()
		return r, true
	}
	p.stats.Misses++
	var zero R
	return zero, false
}

// Failed discards r, taken but not made its session's (err says why), and counts its
// hit as a miss and a failure: the session starts cold.
func (p *Pool[R]) Failed(r R, err error) {
	p.countFailure()
	p.o.Logger.Warn(p.o.Kind+" pool: a ready kernel could not be handed out; starting one cold", "kernel", r.String(), "err", err)
	r.Discard(context.Background())
}

// Lost counts r as Failed does, for a kernel taken and given its session's start block
// that was lost before it became the session's (err says why; its transport has removed
// it already). It returns nil, and the session starts cold as after any failed hand-out,
// unless ctx has ended or err says that a cold start would fail alike
// (errdefs.ErrUnavailable: the kernel's interpreter cannot run): then err.
func (p *Pool[R]) Lost(ctx context.Context, r R, err error) error {
	p.countFailure()
	if ctx.Err() != nil || errdefs.IsUnavailable(err) {
		return err
	}
	p.o.Logger.Warn(p.o.Kind+" pool: a ready kernel was lost at its hand-out; starting one cold", "kernel", r.String(), "err", err)
	return nil
}

// countFailure turns a hit into a miss and a failure.
func (p *Pool[R]) countFailure() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Failures++
	p.stats.Hits--
	p.stats.Misses++
}

// Close stops the filling and discards the ready kernels. It waits for a start under
// way, at most until ctx ends.
func (p *Pool[R]) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	select {
	case <-p.done:
	case <-ctx.Done():
		return fmt.Errorf("close %s pool: %w", p.o.Kind, context.Cause(ctx))
	}
	p.mu.Lock()
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, r := range ready {
		wg.Go(func() { r.Discard(ctx) })
	}
	wg.Wait()
	return nil
}

// fill keeps the pool full until it is closed, one start at a time; a failed start is
// logged and tried again after a backoff (1 s, doubling to 30 s).
func (p *Pool[R]) fill() {
	defer close(p.done)
	backoff := time.Second
	for {
		p.mu.Lock()
		need := !p.closed && len(p.ready) < p.o.Size
		p.mu.Unlock()
		if !need {
			select {
			case <-p.wake:
				continue
			case <-p.ctx.Done():
				return
			}
		}
		began := time.Now()
		r, err := p.o.Start(p.ctx)
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			p.mu.Lock()
			p.stats.Failures++
			p.mu.Unlock()
			p.o.Logger.Warn(p.o.Kind+" pool: a kernel did not get ready; trying again", "in", backoff, "err", err)
			select {
			case <-time.After(backoff):
			case <-p.ctx.Done():
				return
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		took := time.Since(began)
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			r.Discard(context.Background())
			return
		}
		p.ready = append(p.ready, r)
		p.stats.Refills++
		p.stats.RefillTime += took
		p.stats.LastRefill = took
		p.mu.Unlock()
		go p.watch(r)
	}
}

// watch drops r once it ends while it waits in the pool.
func (p *Pool[R]) watch(r R) {
	select {
	case <-r.Exited():
	case <-p.ctx.Done():
		return
	}
	p.mu.Lock()
	i := slices.IndexFunc(p.ready, func(x R) bool { return any(x) == any(r) })
	if i >= 0 {
		p.ready = slices.Delete(p.ready, i, i+1)
	}
	p.mu.Unlock()
	if i >= 0 {
		p.o.Logger.Warn(p.o.Kind+" pool: a ready kernel ended before its hand-out", "kernel", r.String())
		r.Discard(context.Background())
		p.poke()
	}
}

func (p *Pool[R]) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// StartBlock is what a ready kernel reads at its hand-out, after which it is its
// session's: the session's token, then its working directory and whole environment as
// one JSON line.
func StartBlock(token, dir string, env []string) string {
	line, _ := json.Marshal(struct { // strings only: it cannot fail
		Dir string   `json:"dir"`
		Env []string `json:"env"`
	}{dir, env})
	return token + "\n" + string(line) + "\n"
}

// ErrEnded says a kernel ended before it was ready.
var ErrEnded = errors.New("the kernel ended before it was ready")

// WaitSocket waits until the socket file sock exists (a pooled kernel binds it once it
// has loaded, and then waits for its start block alone): ErrEnded when exited closes
// first, an error after a minute or when ctx ends.
func WaitSocket(ctx context.Context, sock string, exited <-chan struct{}) error {
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Lstat(sock); err == nil {
			return nil
		}
		select {
		case <-exited:
			return ErrEnded
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not bound within a minute", sock)
		}
	}
}

// Kernel is what a pool's kernel description must be, whatever its transport: Check
// reads it.
type Kernel struct {
	// Kind names the transport in the refusals ("docker").
	Kind string
	// Size is the pool's size; RunDir the kernels' run directory root; Mounts how many
	// mounts the description has; Pooled whether it names a pool itself.
	Size   int
	RunDir string
	Mounts int
	Pooled bool
}

// Check refuses a pool no transport keeps: a size under 1, kernels not detached (no
// RunDir), mounts of its own (a session's come at hand-out) or kernels of another pool,
// each a *transports.FieldError; and, as errdefs.ErrUnavailable, a controller that is not
// root (a hand-out mounts in another mount namespace).
func Check(k Kernel) error {
	switch {
	case k.Size < 1:
		return &transports.FieldError{Field: "PoolOptions.Size", Reason: fmt.Sprintf("%d: a pool keeps at least one kernel", k.Size)}
	case k.RunDir == "":
		return &transports.FieldError{Field: "PoolOptions.Kernel.RunDir", Reason: "empty: a pool's kernels are detached"}
	case k.Mounts > 0:
		return &transports.FieldError{Field: "PoolOptions.Kernel.Mounts", Reason: "a pool's kernels get their session's mounts at hand-out"}
	case k.Pooled:
		return &transports.FieldError{Field: "PoolOptions.Kernel.Pool", Reason: "a pool's kernels come from no other pool"}
	case os.Geteuid() != 0:
		return fmt.Errorf("%s pool: a session's directories are mounted into a pooled container at hand-out, which needs a controller running as root: %w", k.Kind, errdefs.ErrUnavailable)
	}
	return nil
}
