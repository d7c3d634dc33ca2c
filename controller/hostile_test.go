package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/controller/gate"
	"github.com/kennel-dev/kennel/fshost"
	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/internal/fakekernel"
	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/protocol"
	"github.com/kennel-dev/kennel/transports/wrapped"
)

// fakeTransport is a wrapped transport whose kernels are the fake scenario.
func fakeTransport(t *testing.T, scenario, arg string) *wrapped.Transport {
	t.Helper()
	testneed.Tools(t, "env")
	b, err := images.Stub()
	if err != nil {
		t.Fatal(err)
	}
	prefix := fakekernel.Prefix(scenario, arg, b.Hash())
	// StubDir: no stub bundle is sent (the fake ignores it), only the start block.
	return wrapped.New(wrapped.Options{ArgvPrefix: prefix, StubDir: "/nonexistent", StubHash: b.Hash(), StdinGrace: 300 * time.Millisecond, TermGrace: 300 * time.Millisecond, DrainGrace: 300 * time.Millisecond})
}

// startFake starts a session whose kernel is the fake scenario, serving fs.* in a fresh
// directory; the session is closed at cleanup.
func startFake(t *testing.T, scenario, arg string, opts controller.Options) (*controller.Session, string, error) {
	t.Helper()
	dir := t.TempDir()
	m, err := pathmap.New(pathmap.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	b, err := images.Stub()
	if err != nil {
		t.Fatal(err)
	}
	opts.Transport = fakeTransport(t, scenario, arg)
	opts.Dir = dir
	opts.Bundle = b.Hash()
	if opts.Handler == nil {
		opts.Handler = fshost.New(m, fshost.Options{})
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 20 * time.Second
	}
	opts.StateDir = filepath.Join(t.TempDir(), "state")
	s, err := controller.Start(context.Background(), opts)
	if err == nil {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := s.Close(ctx); err != nil {
				t.Errorf("close session: %v", err)
			}
		})
	}
	return s, dir, err
}

// TestNoHostRequestIsServedBeforeTheHello: a kernel that writes fs.write before its hello,
// or after a hello naming another protocol, gets nothing written; its start fails naming
// why, and its process is gone.
func TestNoHostRequestIsServedBeforeTheHello(t *testing.T) {
	for _, tc := range []struct {
		scenario string
		want     error
		text     string
	}{
		{"early", gate.ErrProtocolFault, "host request before the kernel's hello"},
		{"stale", controller.ErrStale, "kernel is stale"},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			target := filepath.Join(t.TempDir(), "pwned")
			var logs strings.Builder
			var mu sync.Mutex
			logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
				mu.Lock()
				defer mu.Unlock()
				return logs.Write(p)
			}), nil))
			_, dir, err := startFake(t, tc.scenario, "pwned", controller.Options{Logger: logger})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("start: %v, want %v (%q)", err, tc.want, tc.text)
			}
			// Give a request that slipped through time to land.
			time.Sleep(300 * time.Millisecond)
			for _, p := range []string{target, filepath.Join(dir, "pwned")} {
				if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("%s exists: a host request before the checked hello was served (%v)", p, err)
				}
			}
		})
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestAKernelThatNeverReadsCannotWedgeTheController: a kernel that never reads its stdin
// and ignores SIGTERM gets a 1 MiB cell; the caller's deadline ends Execute (interrupt, its
// grace, then the kernel's kill), the kernel is gone, and Close returns.
func TestAKernelThatNeverReadsCannotWedgeTheController(t *testing.T) {
	s, _, err := startFake(t, "deaf", "", controller.Options{InterruptGrace: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	hello, _, _ := s.Kernel()
	big := "x = '" + strings.Repeat("a", 1<<20) + "'"
	for range 2 { // a second cell finds the queue to the kernel full
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		start := time.Now()
		_, err = s.Execute(ctx, big, nil)
		cancel()
		if err == nil {
			t.Fatal("a cell to a kernel that does not read succeeded")
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Fatalf("Execute took %v to give up on a kernel that does not read", d)
		}
		t.Logf("Execute ended after %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	waitGone(t, hello.PID)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	t.Logf("Close took %v", time.Since(start).Round(time.Millisecond))
}

// TestAKernelWhoseStdoutEndsIsKilled: a kernel that closes its frame stream and keeps
// running fails the cell with ErrKernelExited and is killed through its transport's
// ladder without anyone closing the session: a wrapped fake that ignores SIGTERM, and the
// real stub under the local transport whose cell closes the frame channel.
func TestAKernelWhoseStdoutEndsIsKilled(t *testing.T) {
	t.Run("wrapped", func(t *testing.T) {
		s, _, err := startFake(t, "mute", "", controller.Options{})
		if err != nil {
			t.Fatal(err)
		}
		hello, _, _ := s.Kernel()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := s.Execute(ctx, "1", nil); !errors.Is(err, controller.ErrKernelExited) {
			t.Fatalf("cell: %v, want ErrKernelExited", err)
		}
		if err := testproc.Kill(hello.PID, 0); err != nil {
			t.Fatalf("the fake kernel ended by itself (%v): the test proves nothing", err)
		}
		start := time.Now()
		waitGone(t, hello.PID)
		t.Logf("the mute kernel was gone %v after its cell failed", time.Since(start).Round(time.Millisecond))
	})
	t.Run("local", func(t *testing.T) {
		s := startSession(t, controller.Options{})
		hello, _, _ := s.Kernel()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := s.Execute(ctx, `
import gc, os, time
w = [o for o in gc.get_objects() if type(o).__name__ == 'Writer' and hasattr(o, 'write')][0]
os.close(w._fd)
time.sleep(1000)`, nil)
		if !errors.Is(err, controller.ErrKernelExited) {
			t.Fatalf("cell: %v, want ErrKernelExited", err)
		}
		start := time.Now()
		waitGone(t, hello.PID)
		t.Logf("the kernel was gone %v after its cell failed", time.Since(start).Round(time.Millisecond))
	})
}

// TestACellOverTheFrameLimitIsRefusedAndTheKernelGoesOn: a cell whose execute frame would
// be over the line limit fails with ErrFrameTooLarge, naming the limit, before anything
// is sent; the kernel and its namespace are untouched.
func TestACellOverTheFrameLimitIsRefusedAndTheKernelGoesOn(t *testing.T) {
	s := startSession(t, controller.Options{})
	execute(t, s, "kept = 7")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	big := "# " + strings.Repeat("x", protocol.MaxLine)
	_, err := s.Execute(ctx, big, nil)
	if !errors.Is(err, controller.ErrFrameTooLarge) || !strings.Contains(err.Error(), fmt.Sprint(protocol.MaxLine)) {
		t.Fatalf("cell over the limit: %v", err)
	}
	w, err := s.ExecuteWait(ctx, big, time.Minute, nil)
	if !errors.Is(err, controller.ErrFrameTooLarge) {
		t.Fatalf("cell job over the limit: %#v, %v", w, err)
	}
	if res, _ := execute(t, s, "kept"); res.Result == nil || *res.Result != "7" {
		t.Fatalf("the kernel did not go on: %+v", res)
	}
	// Just under the limit still runs (the line is the frame's JSON, code escaped).
	fits := "n = len('" + strings.Repeat("y", protocol.MaxLine-200) + "')\nn"
	if res, _ := execute(t, s, fits); res.Status != "ok" || res.Result == nil {
		t.Fatalf("a cell within the limit: %+v %+v", res, res.Error)
	}
}

// TestAnOversizedHostReplyIsAnErrorReply: a handler result whose reply would be over the
// line limit reaches the kernel as an error reply with code too_large.
func TestAnOversizedHostReplyIsAnErrorReply(t *testing.T) {
	s := startSession(t, controller.Options{Handler: hugeHandler{}})
	res, _ := execute(t, s, "import kennel\ntry:\n    kennel.host_request('test.huge')\n    r = 'served'\nexcept kennel.HostError as e:\n    r = e.code\nr")
	if res.Status != "ok" || res.Result == nil || *res.Result != "'too_large'" {
		t.Fatalf("huge reply: %+v %+v", res, res.Error)
	}
}

type hugeHandler struct{}

func (hugeHandler) Serves(typ string) bool { return typ == "test.huge" }
func (hugeHandler) Serve(ctx context.Context, typ string, args json.RawMessage) (any, error) {
	return map[string]string{"data": strings.Repeat("\x01", protocol.MaxLine/4)}, nil
}

// slowWrites serves fs.write slowly (as a disk would) and records the most request bytes
// its Serve calls held at once.
type slowWrites struct {
	held, peak atomic.Int64
	served     atomic.Int64
}

func (h *slowWrites) Serves(typ string) bool { return typ == "fs.write" }
func (h *slowWrites) Serve(ctx context.Context, typ string, args json.RawMessage) (any, error) {
	var a struct{ Path, Content string }
	if err := json.Unmarshal(args, &a); err != nil {
		return nil, err
	}
	n := h.held.Add(int64(len(args)))
	for p := h.peak.Load(); n > p && !h.peak.CompareAndSwap(p, n); p = h.peak.Load() {
	}
	time.Sleep(time.Second)
	h.held.Add(-int64(len(args)))
	h.served.Add(1)
	return map[string]any{"bytes": len(a.Content)}, nil
}

// TestHostRequestsInFlightAreBoundedInBytes: a kernel that floods 24 fs.write requests of
// 4 MiB each without waiting gets every one served (none refused), while the bytes of
// requests being served at once stay within one line limit and the controller's heap
// stays small; without the bound all 24 would be in memory at once.
func TestHostRequestsInFlightAreBoundedInBytes(t *testing.T) {
	const n, size = 24, 4 << 20
	h := &slowWrites{}
	logged := make(chan string, 16)
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		if s := string(p); strings.Contains(s, "replies ok=") {
			logged <- s
		}
		return len(p), nil
	}), nil))
	var peakHeap atomic.Uint64
	stop := make(chan struct{})
	go sampleHeap(stop, &peakHeap)
	defer close(stop)
	_, _, err := startFake(t, "flood", fmt.Sprintf("%d:%d", n, size), controller.Options{Handler: h, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case line := <-logged:
		if !strings.Contains(line, fmt.Sprintf("replies ok=%d of %d", n, n)) {
			t.Fatalf("the kernel saw: %s", line)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("no end of the flood: %d served", h.served.Load())
	}
	if got := h.peak.Load(); got > int64(protocol.MaxLine) || got == 0 {
		t.Fatalf("%d request bytes were served at once, want at most %d", got, protocol.MaxLine)
	}
	t.Logf("served %d, at most %d MiB of requests at once; peak heap %d MiB", h.served.Load(), h.peak.Load()>>20, peakHeap.Load()>>20)
	if peak := peakHeap.Load(); peak > 512<<20 {
		t.Fatalf("peak heap %d MiB while %d MiB of requests were in flight at most", peak>>20, h.peak.Load()>>20)
	}
}

// sampleHeap records the largest heap (live and unswept objects) seen every 5 ms.
func sampleHeap(stop <-chan struct{}, peak *atomic.Uint64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		metrics.Read(sample)
		if v := sample[0].Value.Uint64(); v > peak.Load() {
			peak.Store(v)
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}
