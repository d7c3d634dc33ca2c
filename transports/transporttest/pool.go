package transporttest

import (
	"context"
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
