package containerd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
	"github.com/kennel-dev/kennel/transports/internal/limits"
	"github.com/kennel-dev/kennel/transports/internal/nsmount"
	"github.com/kennel-dev/kennel/transports/internal/warm"
)

// LabelPool marks the container (and snapshot) of a kernel a Pool started before its
// session ("1"). It is a detached kernel's too (LabelDetached): a sweep keeps it while
// its task runs, and a pooled kernel's task ends with its controller's stdin.
const LabelPool = "dev.kennel.pool"

// PoolOptions configure a Pool.
type PoolOptions struct {
	// Size is how many ready kernels the pool keeps, at least 1.
	Size int
	// Kernel is the description of the pool's kernels: detached (RunDir set), Mounts
	// empty, with the lock-down and image a session's Options must have for its kernel to
	// come from the pool. An empty User is the default for a working directory on no
	// mount: the operator's uid:gid, FallbackUser for root.
	Kernel Options
	// Logger gets the pool's failures. Nil discards them.
	Logger *slog.Logger
}

// Pool keeps ready kernels of one description: each a container made and its task
// started, the stub loaded and its socket bound, waiting for its session; a Transport
// whose Options.Pool is set hands one to a Start of the pool's description (the client,
// image, user, interpreter and lock-down) as the Docker transport's pool does
// (docker.Pool): the session's mounts are cloned and attached in the task's mount
// namespace (transports/internal/nsmount), then its start block gives it the token, the
// session's whole environment (the image's, then the transport's) and its working
// directory. Any other Start is cold (Info.Pool transports.PoolMiss). A pooled kernel is
// used once. The pool needs CAP_SYS_ADMIN (root) and the runc shim running runc or crun
// on this host; NewPool refuses anything else.
//
// Close removes the ready kernels. A controller that dies leaves its ready kernels waiting
// on a stdin FIFO that closes with it: they exit, and a later sweep removes their
// containers once their tasks have stopped.
type Pool struct {
	warm *warm.Pool[*started]
}

// NewPool returns a pool of opts.Size kernels over cli (the client the sessions' own
// Transports use) and starts filling it in the background. A refusal is a
// *transports.FieldError (errdefs.ErrInvalidArgument), or errdefs.ErrUnavailable for what
// this controller or runtime cannot do.
func NewPool(cli *client.Client, opts PoolOptions) (*Pool, error) {
	o := opts.Kernel
	if err := warm.Check(warm.Kernel{Kind: "containerd", Size: opts.Size, RunDir: o.RunDir, Mounts: len(o.Mounts), Pooled: o.Pool != nil}); err != nil {
		return nil, err
	}
	switch o.Runtime {
	case "", DefaultRuntime, "runc", "crun":
	default:
		return nil, fmt.Errorf("containerd pool: runtime %q may run containers outside this host's kernel, where a session's directories cannot be mounted at hand-out: %w", o.Runtime, errdefs.ErrUnavailable)
	}
	o.User = cmp.Or(o.User, docker.DefaultUser(os.Getuid(), os.Getgid(), nil))
	tr, err := New(cli, o)
	if err != nil {
		return nil, err
	}
	if _, _, err := tr.opts.UserFor("/"); err != nil {
		return nil, err
	}
	return &Pool{warm: warm.New(warm.Options[*started]{Kind: "containerd", Key: tr.poolKey("/", ""), Size: opts.Size, Logger: opts.Logger,
		Start: func(ctx context.Context) (*started, error) {
			// Not cut short by Close (an object made after its request was cancelled
			// would be nobody's): Close waits for the create instead.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			defer cancel()
			st, err := tr.create(cctx, transports.Spec{Dir: "/"}, true)
			if err != nil {
				return nil, err
			}
			// Ready once its kernel has loaded and bound its socket.
			err = warm.WaitSocket(ctx, filepath.Join(st.runDir, "kernel.sock"), st.exited)
			if errors.Is(err, warm.ErrEnded) {
				_, why := st.result()
				err = fmt.Errorf("%w (%v)", err, why)
			}
			if err != nil {
				st.Discard(context.Background())
				return nil, fmt.Errorf("task %s: %w", st.c.ID(), err)
			}
			return st, nil
		}})}, nil
}

// poolKey is what a kernel of t's for a session in dir and of python must share with a
// pool's kernels to be one of them: the client, the image, the user (dir's), the
// interpreter and the whole lock-down, each as it resolves; "" (no pool's) when dir's
// user does not resolve.
func (t *Transport) poolKey(dir, python string) string {
	o := t.opts
	uid, gid, err := o.UserFor(dir)
	if err != nil {
		return ""
	}
	image, _ := t.Image()
	k, _ := json.Marshal([]any{
		fmt.Sprintf("%p", t.cli), image, uid, gid, python,
		limits.Of(o.Memory, DefaultMemory), limits.Of(o.CPUQuota, DefaultCPUQuota), limits.Of(o.Pids, DefaultPids), limits.Of(o.TmpfsSize, DefaultTmpfsSize),
		o.Runtime, o.Snapshotter, o.RunDir, o.FIFODir,
	})
	return string(k)
}

// Stats returns what the pool has done so far.
func (p *Pool) Stats() transports.PoolStats { return p.warm.Stats() }

// Close stops the pool's filling and removes its ready kernels. It waits for a start
// under way; later Starts go cold.
func (p *Pool) Close(ctx context.Context) error { return p.warm.Close(ctx) }

// handOut gives the session of spec, started by t, a ready kernel: it returns nil and no
// error when the pool has none of t's description (a miss: the caller starts one cold)
// or could not make one its session's, before or after its start block (it is removed,
// and counted as a failure; see warm.Pool.Lost for the errors that do not go cold).
func (p *Pool) handOut(ctx context.Context, t *Transport, spec transports.Spec) (transports.Kernel, error) {
	st, ok := p.warm.Take(t.poolKey(spec.Dir, spec.Python))
	if !ok {
		return nil, nil
	}
	if err := nsmount.Into(st.ns, nsmount.Binds(t.opts.Mounts)); err != nil {
		p.warm.Failed(st, err)
		return nil, nil
	}
	b, err := t.bundle()
	if err != nil {
		p.warm.Failed(st, err)
		return nil, nil
	}
	// The environment a cold start's kernel gets: the image's, then the transport's.
	env := kernelstart.Overlay(st.imgEnv, t.env(b, st.kid).Build(spec.Env))
	_ = st.ns.Close()
	st.ns = nil
	k, err := st.attach(ctx, warm.StartBlock(st.token, spec.Dir, env))
	if err != nil {
		return nil, p.warm.Lost(ctx, st, err)
	}
	k.SetPool(transports.PoolHit)
	return k, nil
}

// Exited is closed once the task ends (warm.Ready).
func (st *started) Exited() <-chan struct{} { return st.exited }

// String names the container (warm.Ready).
func (st *started) String() string { return "container " + st.c.ID() }
