package launch

import (
	"context"
	"fmt"
	"log/slog"
	"sort"

	"github.com/kennel-dev/kennel/sessionspec"
	"github.com/kennel-dev/kennel/transports/docker"
)

// Pools say how many ready kernels a Kit keeps per transport kind (kennel serve --pool,
// the pool setting). A zero count keeps none.
type Pools struct {
	// Docker is the number of ready Docker kernels of the default description (the
	// kernel image, the lock-down, the default user of a root controller): a session
	// whose Docker description resolves to the same takes one (docker.Options.Pool).
	// Needs a Kit with RunDir (detached kernels) and a root controller.
	Docker int
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
func (k *Kit) StartPools(ctx context.Context, logger *slog.Logger) error {
	n := k.opts.Pools.Docker
	if n == 0 {
		return nil
	}
	if k.opts.RunDir == "" {
		return fmt.Errorf("docker pool: a pool's kernels are detached: the Kit needs a RunDir")
	}
	cli, err := k.engineClient(ctx)
	if err != nil {
		return fmt.Errorf("docker pool: %w", err)
	}
	o, err := k.dockerOptions(&sessionspec.Docker{}, nil)
	if err != nil {
		return err
	}
	p, err := docker.NewPool(cli, docker.PoolOptions{Size: n, Kernel: o, Logger: logger})
	if err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed || k.dockerPool != nil {
		_ = p.Close(context.WithoutCancel(ctx))
		return fmt.Errorf("docker pool: the kit is closed or has its pool")
	}
	k.dockerPool = p
	return nil
}

// PoolStats returns the figures of the Kit's pools, by kind (none without pools).
func (k *Kit) PoolStats() []PoolStat {
	k.mu.Lock()
	p := k.dockerPool
	k.mu.Unlock()
	var out []PoolStat
	if p != nil {
		out = append(out, PoolStat{Kind: "docker", PoolStats: p.Stats()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}

// pool returns the Kit's Docker pool, or nil.
func (k *Kit) pool() *docker.Pool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.dockerPool
}
