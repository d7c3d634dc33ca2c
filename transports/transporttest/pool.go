package transporttest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/transports"
)

// Pool is a transport's warm pool as its tests use it.
type Pool interface {
	Stats() transports.PoolStats
	Close(ctx context.Context) error
}

// KeepPool takes p, just made with err, for the rest of t: it fails t on err, closes p
// when t ends (failing t if that fails) and waits until p holds n ready kernels.
func KeepPool[P Pool](t testing.TB, p P, err error, n int) P {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	WaitReady(t, p, n)
	return p
}

// WaitReady waits until p holds n ready kernels, failing t after a minute.
func WaitReady(t testing.TB, p Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for p.Stats().Ready < n {
		if time.Now().After(deadline) {
			t.Fatalf("pool: %+v after a minute, want %d ready", p.Stats(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// PoolLostStartsCold: a session whose working directory the image lacks loses its pooled
// kernel after the start block (the kernel cannot enter the directory and ends). tr, a
// transport of pool's description with pool as its pool, then removes that kernel, counts
// it as a failure, and starts the session's kernel cold; the runtime makes the working
// directory then, as it does for every cold start.
func PoolLostStartsCold(t *testing.T, pool Pool, tr transports.Transport) {
	t.Helper()
	const dir = "/kennel-not-in-the-image"
	k, c := Start(t, tr, transports.Spec{SessionID: "lost", Dir: dir})
	if got := k.Info().Pool; got != transports.PoolMiss {
		t.Errorf("a hand-out lost after its start block: pool %q, want %q", got, transports.PoolMiss)
	}
	if out, err := c.Run("import os; print(os.getcwd())"); err != nil || strings.TrimSpace(out) != dir {
		t.Errorf("the cold kernel's working directory: %q, %v", out, err)
	}
	if s := pool.Stats(); s.Failures != 1 || s.Hits != 0 || s.Misses != 1 {
		t.Errorf("after a hand-out lost after its start block: %+v", s)
	}
	WaitReady(t, pool, 1)
}
