package daemon_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/client"
	"github.com/kennel-dev/kennel/daemon"
	"github.com/kennel-dev/kennel/internal/fakekernel"
	"github.com/kennel-dev/kennel/internal/reaper"
)

func TestMain(m *testing.M) {
	if reaper.Main() || fakekernel.Main() {
		return
	}
	if v := os.Getenv(apiClientEnv); v != "" {
		os.Exit(apiClientMain(v))
	}
	os.Exit(m.Run())
}

// shortDir returns a fresh private directory with a short path (socket paths must fit
// sun_path), removed at cleanup.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "kd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

// syncBuf is a log sink safe for concurrent writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// running is a daemon serving on a real socket in a test.
type running struct {
	srv    *daemon.Server
	c      *client.Client
	socket string
	logs   *syncBuf
	stop   func() // cancels Serve and waits for its end
}

// serve starts a daemon with opts (Socket and StateDir default to fresh private paths)
// and stops it at cleanup. It ends its sessions' kernels when it stops (StopKernels), as a
// test that leaves nothing behind needs; serveDetaching lets them run on.
func serve(t testing.TB, opts daemon.Options) *running {
	t.Helper()
	opts.StopKernels = true
	return serveDetaching(t, opts)
}

// serveDetaching is serve with opts as they are: a shutdown lets detached kernels run
// on, and a daemon started on the same StateDir resumes them.
func serveDetaching(t testing.TB, opts daemon.Options) *running {
	t.Helper()
	dir, err := os.MkdirTemp("", "kd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if opts.Socket == "" {
		opts.Socket = filepath.Join(dir, "run", "kennel.sock")
	}
	if opts.StateDir == "" {
		opts.StateDir = filepath.Join(dir, "state")
	}
	logs := &syncBuf{}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	srv, err := daemon.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The socket's file appears at bind, a moment before it listens: a dial that
		// connects is the proof (a loaded machine may stall between the two).
		if c, err := net.Dial("unix", opts.Socket); err == nil {
			c.Close()
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not bind its socket")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var once sync.Once
	r := &running{srv: srv, c: client.New(opts.Socket), socket: opts.Socket, logs: logs}
	r.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
			r.c.Close()
		})
	}
	t.Cleanup(r.stop)
	return r
}

// newSession creates a session in a fresh directory.
func (r *running) newSession(t testing.TB) *api.Session {
	t.Helper()
	s, err := r.c.CreateSession(context.Background(), api.CreateSession{Cwd: t.TempDir()}, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
