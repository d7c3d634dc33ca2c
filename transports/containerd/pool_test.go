package containerd_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/transports"
	ctrd "github.com/kennel-dev/kennel/transports/containerd"
	"github.com/kennel-dev/kennel/transports/containerd/containerdtest"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// newPool starts a pool of size kernels of o's description, closed when the test ends,
// and waits until it is full.
func newPool(t testing.TB, cli *client.Client, o ctrd.Options, size int) *ctrd.Pool {
	t.Helper()
	testneed.Root(t) // a pool mounts a session's directories into its containers
	p, err := ctrd.NewPool(cli, ctrd.PoolOptions{Size: size, Kernel: o, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	return transporttest.KeepPool(t, p, err, size)
}

// TestDetachedConformancePooled: kernels a pool hands out pass the suite every transport
// passes (the transports of one case share their run directory root and their pool).
func TestDetachedConformancePooled(t *testing.T) {
	d := containerdtest.Daemon(t)
	opts := map[string]ctrd.Options{}
	var hits uint64
	transporttest.Run(t, func(t *testing.T) transports.Transport {
		o, ok := opts[t.Name()]
		if !ok {
			o = ctrd.Options{RunDir: filepath.Join(t.TempDir(), "run"), User: "65534:65534"}
			o.Pool = newPool(t, d.Client, o, 2)
			opts[t.Name()] = o
			t.Cleanup(func() { hits += o.Pool.Stats().Hits })
		}
		return newTransport(t, d.Client, o)
	}, transporttest.WithSpec(func(t *testing.T, s *transports.Spec) {
		s.Dir = "/tmp"
	}), transporttest.WithTimeout(30*time.Second))
	if hits < uint64(len(opts)/2) {
		t.Errorf("the pools of %d cases handed out %d kernels: the suite ran on cold starts", len(opts), hits)
	}
}

// TestAPooledKernelKeepsNothingOfTheOneBefore: the pool's isolation test
// (transporttest.PooledKernelKeepsNothing).
func TestAPooledKernelKeepsNothingOfTheOneBefore(t *testing.T) {
	d := containerdtest.Daemon(t)
	o := ctrd.Options{RunDir: filepath.Join(t.TempDir(), "run"), User: "65534:65534"}
	pool := newPool(t, d.Client, o, 1)
	transporttest.PooledKernelKeepsNothing(t, pool, transporttest.StartFor(func(t *testing.T, mounts []pathmap.Mount, pooled bool) transports.Transport {
		o := o
		o.Mounts = mounts
		if pooled {
			o.Pool = pool
		}
		return newTransport(t, d.Client, o)
	}))
}

// TestAHandOutLostAfterItsStartBlockStartsCold: transporttest.PoolLostStartsCold.
func TestAHandOutLostAfterItsStartBlockStartsCold(t *testing.T) {
	d := containerdtest.Daemon(t)
	o := ctrd.Options{RunDir: filepath.Join(t.TempDir(), "run"), User: "65534:65534"}
	o.Pool = newPool(t, d.Client, o, 1)
	transporttest.PoolLostStartsCold(t, o.Pool, newTransport(t, d.Client, o))
}

// BenchmarkPoolHandOutVsColdStart: the containerd pool's hand-out (a session's directory
// mounted at /work) beside a cold detached start of the same description.
//
//	go test -run '^$' -bench PoolHandOutVsColdStart -benchtime 20x -count 3 ./transports/containerd/
func BenchmarkPoolHandOutVsColdStart(b *testing.B) {
	d := containerdtest.Daemon(b)
	o := ctrd.Options{RunDir: filepath.Join(b.TempDir(), "run"), User: "65534:65534"}
	pool := newPool(b, d.Client, o, 1)
	pooled, cold := o, o
	pooled.Pool = pool
	pooled.Mounts = []pathmap.Mount{{Host: b.TempDir(), Sandbox: "/work"}}
	cold.Mounts = pooled.Mounts
	transporttest.BenchHandOut(b, newTransport(b, d.Client, pooled), newTransport(b, d.Client, cold),
		transports.Spec{SessionID: "bench", Dir: "/work"}, func() { transporttest.WaitReady(b, pool, 1) })
}
