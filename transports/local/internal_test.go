package local

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

func TestCacheComputesOncePerKey(t *testing.T) {
	var c cache[int]
	var calls atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	results := make([]int, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := c.get(context.Background(), "k", func(context.Context) (int, error) {
				calls.Add(1)
				<-release
				return 7, nil
			})
			if err != nil {
				t.Error(err)
			}
			results[i] = v
		}()
	}
	close(release)
	wg.Wait()
	if calls.Load() != 1 {
		t.Fatalf("computed %d times, want once", calls.Load())
	}
	for _, v := range results {
		if v != 7 {
			t.Fatalf("results %v", results)
		}
	}
}

func TestCacheForgetsFailures(t *testing.T) {
	var c cache[string]
	boom := errors.New("boom")
	if _, err := c.get(context.Background(), "k", func(context.Context) (string, error) { return "", boom }); !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
	v, err := c.get(context.Background(), "k", func(context.Context) (string, error) { return "ok", nil })
	if err != nil || v != "ok" {
		t.Fatalf("after a failure: %q, %v; want a new try", v, err)
	}
	func() {
		defer func() { _ = recover() }()
		_, _ = c.get(context.Background(), "p", func(context.Context) (string, error) { panic("x") })
	}()
	v, err = c.get(context.Background(), "p", func(context.Context) (string, error) { return "after panic", nil })
	if err != nil || v != "after panic" {
		t.Fatalf("after a panic: %q, %v", v, err)
	}
}

func TestCacheWaiterHonoursItsContext(t *testing.T) {
	var c cache[int]
	started, release := make(chan struct{}), make(chan struct{})
	go func() {
		_, _ = c.get(context.Background(), "k", func(context.Context) (int, error) {
			close(started)
			<-release
			return 1, nil
		})
	}()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.get(ctx, "k", nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	close(release)
}
