package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/transports"
)

// LabelPool marks the container of a kernel started ahead of its session, in a Pool: its
// value is the pool's instance (Pool.Instance). It is a detached kernel's container too
// (LabelDetached, LabelDetachedOwner), so a sweep of its owner's state removes it once no
// record holds it and it is no live pool's (SweepOptions.Pool): a pool's kernels are
// never a record's before their hand-out.
const LabelPool = "dev.kennel.pool"

// Info.Pool's words: a kernel handed out by the pool, or started cold beside a pool that
// had none for its description.
const (
	PoolHit  = "hit"
	PoolMiss = "miss"
)

// PoolOptions configure a Pool.
type PoolOptions struct {
	// Size is how many ready kernels the pool keeps, at least 1.
	Size int
	// Kernel is the description of the pool's kernels: detached run mode (RunDir set,
	// Container and Mounts empty), with the lock-down and image a session's Options must
	// have for its kernel to come from the pool. An empty User is the default for a
	// working directory on no mount: the operator's uid:gid, FallbackUser for root.
	Kernel Options
	// Logger gets the pool's failures to start a kernel. Nil discards them.
	Logger *slog.Logger
}

// PoolStats is what a Pool has done so far.
type PoolStats struct {
	// Size is the number of ready kernels the pool keeps; Ready how many it has now.
	Size, Ready int
	// Hits counts kernels handed out; Misses kernels started cold beside the pool (none
	// ready, or none of the session's description).
	Hits, Misses uint64
	// Refills counts the kernels the pool made ready; RefillTime is their time in all
	// (from the container's creation to a kernel waiting for its session), LastRefill the
	// newest one's.
	Refills                uint64
	RefillTime, LastRefill time.Duration
	// Failures counts the pool's starts that failed (each logged, then tried again after
	// a backoff of up to 30 s).
	Failures uint64
}

// Pool keeps ready kernels of one description: containers made, started and locked down,
// each with the stub loaded and waiting for its session, so that a session's Start takes
// one (Options.Pool) in place of a cold start.
//
// A pooled kernel is a fresh one: it has run nothing, and it is handed out once, never
// taken back. What a session brings is given at the hand-out: its mounts (and job output
// directory) are mounted into the container's mount namespace by mountInto, as the engine
// would have at creation (read-only ones read-only before they are attached); its
// environment and working directory reach the stub in its start block on stdin (the
// whole environment is replaced: nothing of the pool's stays), with the token that ties
// the kernel to the session's link. So the pool needs a controller with CAP_SYS_ADMIN
// (root), an engine on this host (a unix socket) and a runtime on this host's kernel
// (runc, crun); NewPool refuses anything else.
//
// A kernel that ends while it waits (its container stopped, removed) is dropped and
// replaced. Close ends the pool: its ready kernels' containers and run directories are
// removed. A controller that dies leaves its ready kernels waiting on a stdin that
// closes with it: they exit, their containers are removed by the engine (AutoRemove),
// and the next controller's sweep of its state takes what is left.
type Pool struct {
	tr       *Transport
	instance string
	key      string
	size     int
	log      *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	wake   chan struct{}

	mu     sync.Mutex
	ready  []*detachedContainer
	stats  PoolStats
	closed bool
}

// NewPool returns a pool of opts.Size kernels over cli (the engine the sessions' own
// Transports use) and starts filling it in the background. A refusal is a
// *transports.FieldError (errdefs.ErrInvalidArgument), or errdefs.ErrUnavailable for what
// this controller or engine cannot do (no CAP_SYS_ADMIN, a remote engine, a runtime in a
// VM).
func NewPool(cli client.APIClient, opts PoolOptions) (*Pool, error) {
	o := opts.Kernel
	switch {
	case opts.Size < 1:
		return nil, &transports.FieldError{Field: "PoolOptions.Size", Reason: fmt.Sprintf("%d: a pool keeps at least one kernel", opts.Size)}
	case o.RunDir == "":
		return nil, &transports.FieldError{Field: "PoolOptions.Kernel.RunDir", Reason: "empty: a pool's kernels are detached"}
	case o.Container != "":
		return nil, &transports.FieldError{Field: "PoolOptions.Kernel.Container", Reason: "a pool's kernels run in containers of their own (run mode)"}
	case len(o.Mounts) > 0:
		return nil, &transports.FieldError{Field: "PoolOptions.Kernel.Mounts", Reason: "a pool's kernels get their session's mounts at hand-out"}
	case o.Pool != nil:
		return nil, &transports.FieldError{Field: "PoolOptions.Kernel.Pool", Reason: "a pool's kernels come from no other pool"}
	}
	if !poolRuntime(o.Runtime) {
		return nil, fmt.Errorf("docker pool: runtime %q runs containers outside this host's kernel, where a session's directories cannot be mounted at hand-out: %w", o.Runtime, cerrdefs.ErrUnavailable)
	}
	if cli != nil && !strings.HasPrefix(cli.DaemonHost(), "unix://") {
		return nil, fmt.Errorf("docker pool: engine %s is not on this host, where a session's directories are mounted at hand-out: %w", cli.DaemonHost(), cerrdefs.ErrUnavailable)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("docker pool: a session's directories are mounted into a pooled container at hand-out, which needs a controller running as root: %w", cerrdefs.ErrUnavailable)
	}
	if o.User == "" {
		o.User = DefaultUser(os.Getuid(), os.Getgid(), nil)
	}
	if _, _, err := numericUser(o.User); err != nil {
		return nil, &transports.FieldError{Field: "PoolOptions.Kernel.User", Reason: fmt.Sprintf("%q: a pool's kernels run as a numeric uid:gid", o.User)}
	}
	tr, err := New(cli, o)
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	inst := make([]byte, 8)
	if _, err := rand.Read(inst); err != nil {
		return nil, err
	}
	p := &Pool{tr: tr, instance: hex.EncodeToString(inst), size: opts.Size, log: log, done: make(chan struct{}), wake: make(chan struct{}, 1)}
	p.key = tr.poolKey(cli, tr.opts.User, "")
	p.stats.Size = opts.Size
	p.ctx, p.cancel = context.WithCancel(context.Background())
	go p.fill()
	return p, nil
}

// poolRuntime reports whether runtime runs containers on this host's kernel, in mount
// namespaces the controller can enter.
func poolRuntime(runtime string) bool {
	switch runtime {
	case "", "runc", "crun", "io.containerd.runc.v2":
		return true
	}
	return false
}

// poolKey is what a kernel of t's for a session of user and python must share with a
// pool's kernels to be one of them: the engine, the image, the user, the interpreter and
// the whole lock-down, each as it resolves (a zero limit as its default).
func (t *Transport) poolKey(cli client.APIClient, user, python string) string {
	o := t.opts
	image, _ := t.Image()
	network := o.Network
	if network == "" {
		network = DefaultNetwork
	}
	tmpfs := o.TmpfsSize
	if tmpfs <= 0 {
		tmpfs = DefaultTmpfsSize
	}
	engine := ""
	if cli != nil {
		engine = cli.DaemonHost()
	}
	k, _ := json.Marshal([]any{
		engine, image, user, python, network,
		limit(o.Memory, DefaultMemory), limit(o.NanoCPUs, DefaultNanoCPUs), limit(o.Pids, DefaultPids), tmpfs,
		o.Runtime, o.CapAdd, o.AllowNewPrivileges, o.WritableRootfs, o.NoInit, o.SecurityOpt,
		o.RunDir, o.DetachedOwner, o.Container,
	})
	return string(k)
}

// Instance names this pool among the pools of its owner: the LabelPool of its
// containers, which a sweep keeps (SweepOptions.Pool).
func (p *Pool) Instance() string { return p.instance }

// Stats returns what the pool has done so far.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Ready = len(p.ready)
	return s
}

// Close stops the pool's filling and removes its ready kernels' containers and run
// directories. It waits for a start under way; later Starts go cold.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	select {
	case <-p.done:
	case <-ctx.Done():
		return fmt.Errorf("close docker pool: %w", context.Cause(ctx))
	}
	p.mu.Lock()
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range ready {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.tr.discard(ctx, c)
		}()
	}
	wg.Wait()
	return nil
}

// fill keeps the pool full until it is closed, one start at a time.
func (p *Pool) fill() {
	defer close(p.done)
	backoff := time.Second
	for {
		p.mu.Lock()
		need := !p.closed && len(p.ready) < p.size
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
		c, err := p.start()
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			p.mu.Lock()
			p.stats.Failures++
			p.mu.Unlock()
			p.log.Warn("docker pool: a kernel did not get ready; trying again", "in", backoff, "err", err)
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
			p.tr.discard(context.Background(), c)
			return
		}
		p.ready = append(p.ready, c)
		p.stats.Refills++
		p.stats.RefillTime += took
		p.stats.LastRefill = took
		p.mu.Unlock()
		go p.watch(c)
	}
}

// start makes one ready kernel: its container started and its stub waiting.
func (p *Pool) start() (*detachedContainer, error) {
	bc, err := p.tr.bundle()
	if err != nil {
		return nil, err
	}
	c, err := p.tr.prepareDetached(p.ctx, bc, transports.Spec{Dir: "/"}, p.instance)
	if err != nil {
		return nil, err
	}
	if err := waitListening(p.ctx, c); err != nil {
		p.tr.discard(context.Background(), c)
		return nil, err
	}
	return c, nil
}

// waitListening waits until c's pooled kernel has loaded and bound its socket (it then
// waits for its start block alone), or fails when its container ends first or after a
// minute.
func waitListening(ctx context.Context, c *detachedContainer) error {
	sock := filepath.Join(c.runDir, "kernel.sock")
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Lstat(sock); err == nil {
			return nil
		}
		select {
		case <-c.exited:
			_, err := c.result()
			return fmt.Errorf("container %.12s ended before its kernel was ready (stderr %q): %v", c.id, c.early.String(), err)
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("container %.12s: its kernel was not ready within a minute (stderr %q)", c.id, c.early.String())
		}
	}
}

// watch drops c once its container ends while it waits in the pool.
func (p *Pool) watch(c *detachedContainer) {
	select {
	case <-c.exited:
	case <-c.ctx.Done():
		return
	}
	p.mu.Lock()
	i := -1
	for j, r := range p.ready {
		if r == c {
			i = j
		}
	}
	if i >= 0 {
		p.ready = append(p.ready[:i], p.ready[i+1:]...)
	}
	p.mu.Unlock()
	if i >= 0 {
		_, err := c.result()
		p.log.Warn("docker pool: a ready kernel ended before its hand-out", "container", c.id, "stderr", c.early.String(), "err", err)
		p.tr.discard(context.Background(), c)
		p.poke()
	}
}

func (p *Pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take returns a ready kernel of key's description, or nil (a miss); either is counted.
func (p *Pool) take(key string) *detachedContainer {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed && key == p.key {
		for len(p.ready) > 0 {
			c := p.ready[0]
			p.ready = p.ready[1:]
			select {
			case <-c.exited: // ended meanwhile: its watch removes it
				continue
			default:
			}
			p.stats.Hits++
			p.poke()
			return c
		}
	}
	p.stats.Misses++
	return nil
}

// handOut gives the session of spec, started by t, a ready kernel: it returns nil and no
// error when the pool has none of t's description (a miss: the caller starts one cold)
// or could not make one its session's (it is removed, and counted as a failure).
func (p *Pool) handOut(ctx context.Context, t *Transport, bc bundleCache, spec transports.Spec) (transports.Kernel, error) {
	c := p.take(t.poolKey(t.cli, t.opts.UserFor(spec.Dir), spec.Python))
	if c == nil {
		return nil, nil
	}
	binds := make([]bind, 0, len(t.opts.Mounts)+1)
	for _, m := range t.opts.Mounts {
		binds = append(binds, bind{Host: m.Host, Target: m.Sandbox, ReadOnly: m.ReadOnly})
	}
	if m, ok := t.jobOutMount(spec); ok {
		binds = append(binds, bind{Host: m.Source, Target: m.Target})
		c.jobOutDir = ContainerJobOutDir
	}
	if err := mountInto(c.ns, binds); err != nil {
		p.failed(c, err)
		return nil, nil
	}
	// The environment a cold start's kernel gets: the engine's HOSTNAME first, then
	// the transport's (which a session's HOSTNAME overrides).
	env := t.env(bc.bundle, spec, "", c.inside)
	if c.hostname != "" {
		env = append([]string{"HOSTNAME=" + c.hostname}, env...)
	}
	block, err := json.Marshal(struct {
		Dir string   `json:"dir"`
		Env []string `json:"env"`
	}{spec.Dir, env})
	if err != nil {
		p.failed(c, err)
		return nil, nil
	}
	_ = c.ns.Close()
	k, err := t.reachDetached(ctx, c, c.token+"\n"+string(block)+"\n")
	if err != nil {
		return nil, err
	}
	k.SetPool(PoolHit)
	return k, nil
}

// failed removes c, which could not be handed out, and counts it.
func (p *Pool) failed(c *detachedContainer, err error) {
	p.mu.Lock()
	p.stats.Failures++
	p.stats.Hits--
	p.stats.Misses++
	p.mu.Unlock()
	p.log.Warn("docker pool: a ready kernel could not be handed out; starting one cold", "container", c.id, "err", err)
	p.tr.discard(context.Background(), c)
}

// errNoNamespace says a pooled container's mount namespace could not be held.
var errNoNamespace = errors.New("no mount namespace")

// holdNamespace opens the mount namespace of container id's process pid, checking
// afterwards that the container still runs with that pid (so the namespace is its).
func (t *Transport) holdNamespace(ctx context.Context, id string, pid int) (*os.File, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("container %.12s: %w: its pid is %d", id, errNoNamespace, pid)
	}
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/mnt")
	if err != nil {
		return nil, fmt.Errorf("container %.12s: %w: %w", id, errNoNamespace, err)
	}
	ins, err := t.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil || ins.Container.State == nil || !ins.Container.State.Running || ins.Container.State.Pid != pid {
		_ = f.Close()
		return nil, fmt.Errorf("container %.12s: %w: it no longer runs as pid %d", id, errNoNamespace, pid)
	}
	return f, nil
}
