package launch

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/sessionspec"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/containerd"
	"github.com/kennel-dev/kennel/transports/docker"
	"github.com/kennel-dev/kennel/transports/kubernetes"
)

// Pools say how many ready kernels a Kit keeps per transport kind (kennel serve --pool,
// the pool setting). A zero count keeps none.
type Pools struct {
	// Docker is the number of ready Docker kernels of the default description (the
	// kernel image, the lock-down, the default user of a root controller): a session
	// whose Docker description resolves to the same takes one (docker.Options.Pool).
	// Needs a Kit with RunDir (detached kernels) and a root controller.
	Docker int
	// Containerd is the number of ready containerd kernels of the default description
	// kept on the containerd at ContainerdAddress (empty: containerd.DefaultAddress).
	Containerd        int
	ContainerdAddress string
	// Kubernetes is the number of ready Kubernetes kernels of the default description
	// (the default kubeconfig and context) kept on KubernetesNode, the controller's own
	// node (empty: kubernetes.LocalNode), whose container runtime KubernetesRuntime names (its CRI endpoint; empty:
	// kubernetes.DefaultRuntime). A session takes one when its description names that
	// node too (kubernetes.Pool).
	Kubernetes        int
	KubernetesNode    string
	KubernetesRuntime string
}

// PoolStat is one pool's figures, by transport kind.
type PoolStat struct {
	// Kind is the transport kind ("docker").
	Kind string
	docker.PoolStats
}

// StartPools starts the pools Options.Pools names (none: nothing to do), each filling in
// the background. It fails, having started none, when one cannot be kept here (no
// RunDir, no engine, no root); call it once, before the Kit's first session. logger gets
// the pools' failures to start a kernel (nil discards them).
func (k *Kit) StartPools(ctx context.Context, logger *slog.Logger) (err error) {
	ps := k.opts.Pools
	if ps.Docker == 0 && ps.Containerd == 0 && ps.Kubernetes == 0 {
		return nil
	}
	if k.opts.RunDir == "" {
		return fmt.Errorf("pools: a pool's kernels are detached: the Kit needs a RunDir")
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("pools: a session's directories are mounted into a waiting kernel's container at hand-out, which needs a daemon running as root (run it as root, or without --pool and the pool setting): %w", errdefs.ErrUnavailable)
	}
	var started []kitPool
	defer func() {
		if err != nil {
			for _, p := range started {
				_ = p.pool.Close(context.WithoutCancel(ctx))
			}
		}
	}()
	var dp *docker.Pool
	if ps.Docker > 0 {
		cli, err := k.engineClient(ctx)
		if err != nil {
			return fmt.Errorf("docker pool: %w", err)
		}
		o, err := k.dockerOptions(&sessionspec.Docker{}, nil)
		if err != nil {
			return err
		}
		if dp, err = docker.NewPool(cli, docker.PoolOptions{Size: ps.Docker, Kernel: o, Logger: logger}); err != nil {
			return err
		}
		started = append(started, kitPool{"docker", dp})
	}
	var cp *containerd.Pool
	addr := ctrdAddress(ps.ContainerdAddress)
	if ps.Containerd > 0 {
		cli, err := k.containerdClient(ctx, addr)
		if err != nil {
			return fmt.Errorf("containerd pool: %w", err)
		}
		o, err := k.containerdOptions(&sessionspec.Containerd{}, nil)
		if err != nil {
			return err
		}
		if cp, err = containerd.NewPool(cli, containerd.PoolOptions{Size: ps.Containerd, Kernel: o, Logger: logger}); err != nil {
			return err
		}
		started = append(started, kitPool{"containerd", cp})
	}
	var kp *kubernetes.Pool
	if ps.Kubernetes > 0 {
		cli, err := k.kubeClient(ctx, "", "")
		if err != nil {
			return fmt.Errorf("kubernetes pool: %w", err)
		}
		node := ps.KubernetesNode
		if node == "" {
			if node, err = kubernetes.LocalNode(ctx, cli); err != nil {
				return fmt.Errorf("kubernetes pool: its pods run on this machine's node: %w (name it with --pool-node)", err)
			}
		}
		o, err := k.kubernetesOptions(&sessionspec.Kubernetes{Node: node}, nil)
		if err != nil {
			return err
		}
		if kp, err = kubernetes.NewPool(ctx, cli, kubernetes.PoolOptions{Size: ps.Kubernetes, Kernel: o, Runtime: cmp.Or(ps.KubernetesRuntime, kubernetes.DefaultRuntime), Logger: logger}); err != nil {
			return fmt.Errorf("kubernetes pool: %w", err)
		}
		started = append(started, kitPool{"kubernetes", kp})
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed || k.pools != nil {
		return fmt.Errorf("pools: the kit is closed or has its pools")
	}
	slices.SortFunc(started, func(a, b kitPool) int { return strings.Compare(a.kind, b.kind) })
	k.pools, k.dockerPool, k.ctrdPool, k.ctrdPoolAddr, k.kubePool = started, dp, cp, addr, kp
	return nil
}

// kitPool is a warm pool of a Kit's, of one transport kind.
type kitPool struct {
	kind string
	pool interface {
		Stats() transports.PoolStats
		Close(context.Context) error
	}
}

// PoolStats returns the figures of the Kit's pools, by kind (none without pools).
func (k *Kit) PoolStats() []PoolStat {
	k.mu.Lock()
	pools := k.pools
	k.mu.Unlock()
	var out []PoolStat
	for _, p := range pools {
		out = append(out, PoolStat{Kind: p.kind, PoolStats: p.pool.Stats()})
	}
	return out
}

// ctrdPoolFor returns the Kit's containerd pool when it is addr's (a normalized
// address), or nil.
func (k *Kit) ctrdPoolFor(addr string) *containerd.Pool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if addr != k.ctrdPoolAddr {
		return nil
	}
	return k.ctrdPool
}

// kubePoolFor returns the Kit's Kubernetes pool when the description's kubeconfig and
// context are the pool's (the defaults), or nil.
func (k *Kit) kubePoolFor(d *sessionspec.Kubernetes) *kubernetes.Pool {
	if d.Kubeconfig != "" || d.Context != "" {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.kubePool
}

// pool returns the Kit's Docker pool, or nil.
func (k *Kit) pool() *docker.Pool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.dockerPool
}
