package docker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/limits"
	"github.com/kennel-dev/kennel/transports/internal/nsmount"
	"github.com/kennel-dev/kennel/transports/internal/warm"
)

// LabelPool marks the container of a kernel started ahead of its session, in a Pool: its
// value is the pool's instance (Pool.Instance). It is a detached kernel's container too
// (LabelDetached, LabelDetachedOwner), so a sweep of its owner's state removes it once no
// record holds it and it is no live pool's (SweepOptions.Pool): a pool's kernels are
// never a record's before their hand-out.
const LabelPool = "dev.kennel.pool"

// Info.Pool's words (transports.PoolHit, transports.PoolMiss).
const (
	PoolHit  = transports.PoolHit
	PoolMiss = transports.PoolMiss
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
type PoolStats = transports.PoolStats

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
	warm     *warm.Pool[*detachedContainer]
}

// NewPool returns a pool of opts.Size kernels over cli (the engine the sessions' own
// Transports use) and starts filling it in the background. A refusal is a
// *transports.FieldError (errdefs.ErrInvalidArgument), or errdefs.ErrUnavailable for what
// this controller or engine cannot do (no CAP_SYS_ADMIN, a remote engine, a runtime in a
// VM).
func NewPool(cli client.APIClient, opts PoolOptions) (*Pool, error) {
	o := opts.Kernel
	if err := warm.Check(warm.Kernel{Kind: "docker", Size: opts.Size, RunDir: o.RunDir, Mounts: len(o.Mounts), Pooled: o.Pool != nil}); err != nil {
		return nil, err
	}
	if o.Container != "" {
		return nil, &transports.FieldError{Field: "PoolOptions.Kernel.Container", Reason: "a pool's kernels run in containers of their own (run mode)"}
	}
	if !hostRuntime(o.Runtime) {
		return nil, fmt.Errorf("docker pool: runtime %q runs containers outside this host's kernel, where a session's directories cannot be mounted at hand-out: %w", o.Runtime, cerrdefs.ErrUnavailable)
	}
	if cli != nil && !strings.HasPrefix(cli.DaemonHost(), "unix://") {
		return nil, fmt.Errorf("docker pool: engine %s is not on this host, where a session's directories are mounted at hand-out: %w", cli.DaemonHost(), cerrdefs.ErrUnavailable)
	}
	o.User = cmp.Or(o.User, DefaultUser(os.Getuid(), os.Getgid(), nil))
	if _, _, err := numericUser(o.User); err != nil {
		return nil, &transports.FieldError{Field: "PoolOptions.Kernel.User", Reason: fmt.Sprintf("%q: a pool's kernels run as a numeric uid:gid", o.User)}
	}
	tr, err := New(cli, o)
	if err != nil {
		return nil, err
	}
	inst := make([]byte, 8)
	_, _ = rand.Read(inst) // never fails
	p := &Pool{tr: tr, instance: hex.EncodeToString(inst)}
	p.warm = warm.New(warm.Options[*detachedContainer]{Kind: "docker", Key: tr.poolKey(cli, tr.opts.User, ""), Size: opts.Size, Start: p.start, Logger: opts.Logger})
	return p, nil
}

// hostRuntime reports whether runtime runs containers on this host's kernel, where the
// controller can enter their mount namespaces and share files with them.
func hostRuntime(runtime string) bool {
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
	network := cmp.Or(o.Network, DefaultNetwork)
	engine := ""
	if cli != nil {
		engine = cli.DaemonHost()
	}
	k, _ := json.Marshal([]any{
		engine, image, user, python, network,
		limits.Of(o.Memory, DefaultMemory), limits.Of(o.NanoCPUs, DefaultNanoCPUs), limits.Of(o.Pids, DefaultPids), limits.Positive(o.TmpfsSize, DefaultTmpfsSize),
		o.Runtime, o.CapAdd, o.AllowNewPrivileges, o.WritableRootfs, o.NoInit, o.SecurityOpt,
		o.RunDir, o.DetachedOwner, o.Container,
	})
	return string(k)
}

// Instance names this pool among the pools of its owner: the LabelPool of its
// containers, which a sweep keeps (SweepOptions.Pool).
func (p *Pool) Instance() string { return p.instance }

// Stats returns what the pool has done so far.
func (p *Pool) Stats() PoolStats { return p.warm.Stats() }

// Close stops the pool's filling and removes its ready kernels' containers and run
// directories. It waits for a start under way; later Starts go cold.
func (p *Pool) Close(ctx context.Context) error { return p.warm.Close(ctx) }

// start makes one ready kernel: its container started and its stub waiting.
func (p *Pool) start(ctx context.Context) (*detachedContainer, error) {
	bc, err := p.tr.bundle()
	if err != nil {
		return nil, err
	}
	// Not cut short by Close: a create the engine carried out after its request was
	// cancelled would leave a container nobody knows of. Close waits for it instead.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	c, err := p.tr.prepareDetached(cctx, bc, transports.Spec{Dir: "/"}, p.instance)
	if err != nil {
		return nil, err
	}
	// Ready once its kernel has loaded and bound its socket: it then waits for its start
	// block alone.
	if err := warm.WaitSocket(ctx, filepath.Join(c.runDir, "kernel.sock"), c.exited); err != nil {
		c.Discard(context.Background())
		return nil, fmt.Errorf("container %.12s: %w (stderr %q)", c.id, err, c.early.String())
	}
	return c, nil
}

// handOut gives the session of spec, started by t, a ready kernel: it returns nil and no
// error when the pool has none of t's description (a miss: the caller starts one cold)
// or could not make one its session's, before or after its start block (it is removed,
// and counted as a failure; see warm.Pool.Lost for the errors that do not go cold).
func (p *Pool) handOut(ctx context.Context, t *Transport, bc bundleCache, spec transports.Spec) (transports.Kernel, error) {
	c, ok := p.warm.Take(t.poolKey(t.cli, t.opts.UserFor(spec.Dir), spec.Python))
	if !ok {
		return nil, nil
	}
	binds := nsmount.Binds(t.opts.Mounts)
	if m, ok := t.jobOutMount(spec); ok {
		binds = append(binds, nsmount.Bind{Host: m.Source, Target: m.Target})
		c.jobOutDir = ContainerJobOutDir
	}
	if err := nsmount.Into(c.ns, binds); err != nil {
		p.warm.Failed(c, err)
		return nil, nil
	}
	// The environment a cold start's kernel gets: the engine's HOSTNAME first, then
	// the transport's (which a session's HOSTNAME overrides).
	env := t.env(bc.bundle, spec, "", c.inside)
	if c.hostname != "" {
		env = append([]string{"HOSTNAME=" + c.hostname}, env...)
	}
	_ = c.ns.Close()
	k, err := t.reachDetached(ctx, c, warm.StartBlock(c.token, spec.Dir, env))
	if err != nil {
		return nil, p.warm.Lost(ctx, c, err)
	}
	k.SetPool(PoolHit)
	return k, nil
}

// Exited is closed once the container ends (warm.Ready).
func (c *detachedContainer) Exited() <-chan struct{} { return c.exited }

// String names the container (warm.Ready).
func (c *detachedContainer) String() string { return "container " + c.id[:min(12, len(c.id))] }
