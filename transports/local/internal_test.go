package local

import (
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"pgregory.net/rapid"

	"github.com/kennel-dev/kennel/transports/transporttest"
)

func TestKernelEnvOrder(t *testing.T) {
	key := rapid.SampledFrom([]string{"A", "B", "PATH", "KENNEL_KERNEL_OWNER_PID", "KENNEL_KERNEL_OWNER",
		"KENNEL_KERNEL_BUNDLE", "KENNEL_KERNEL_EOF_GRACE", "MALLOC_MMAP_THRESHOLD_"})
	entry := rapid.Custom(func(t *rapid.T) string {
		return key.Draw(t, "key") + "=" + rapid.StringMatching(`[a-z0-9=]{0,6}`).Draw(t, "value")
	})
	rapid.Check(t, func(t *rapid.T) {
		host := rapid.SliceOf(entry).Draw(t, "host")
		stub := rapid.SliceOf(entry).Draw(t, "stub")
		spec := rapid.SliceOf(entry).Draw(t, "spec")
		owner := rapid.IntRange(1, 1<<22).Draw(t, "owner")
		// One entry per key, and the same as layering: host without KENNEL_KERNEL_*,
		// owner, stub, spec.
		want := map[string]string{}
		for _, kv := range host {
			if !strings.HasPrefix(kv, "KENNEL_KERNEL_") {
				k, v, _ := strings.Cut(kv, "=")
				want[k] = v
			}
		}
		want["KENNEL_KERNEL_OWNER_PID"] = strconv.Itoa(owner)
		for _, layer := range [][]string{stub, spec} {
			for k, v := range transporttest.EnvMap(layer) {
				want[k] = v
			}
		}
		if err := transporttest.CheckEnv(kernelEnv(host, owner, stub, spec), want); err != nil {
			t.Fatal(err)
		}
	})
}

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

func TestEOFCloserReleasesTheFileAndStaysAtEOF(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	ec := &eofCloser{f: r}
	_, _ = w.WriteString("abc")
	w.Close()
	b, err := io.ReadAll(ec)
	if err != nil || string(b) != "abc" {
		t.Fatalf("read %q, %v", b, err)
	}
	if n, err := ec.Read(make([]byte, 4)); n != 0 || err != io.EOF {
		t.Fatalf("after EOF: %d, %v", n, err)
	}
	if _, err := r.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("file not closed at EOF: %v", err)
	}
}
