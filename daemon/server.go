package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/kennel-dev/kennel/images"
)

// Options configure a Server. Every zero value is documented and usable.
type Options struct {
	// Socket is the unix socket's path. Empty means DefaultSocket(os.Getenv).
	Socket string
	// StateDir is the daemon's private state directory (job output spills, workspaces).
	// Empty means DefaultStateDir(os.Getenv).
	StateDir string
	// Setup builds each session's kernel transport. Nil means DefaultSetup().
	Setup SetupFunc
	// Logger receives the daemon's diagnostics (refused peers, sessions' warnings). Nil
	// discards them.
	Logger *slog.Logger
	// StopWait is how long a job stop waits for the job's end before it answers
	// unconfirmed. Zero means 15 s.
	StopWait time.Duration
	// ShutdownGrace bounds the graceful shutdown of requests in flight. Zero means 10 s.
	ShutdownGrace time.Duration
	// PeerUID is the only peer uid served. Zero means the daemon's effective uid; a
	// negative value is refused by New (it would serve no one).
	PeerUID int
}

// DefaultStateDir is $XDG_STATE_HOME/kennel, else ~/.local/state/kennel, else
// kennel-state-<uid> in the temporary directory.
func DefaultStateDir(getenv func(string) string) string {
	if d := getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "kennel")
	}
	if h := getenv("HOME"); filepath.IsAbs(h) {
		return filepath.Join(h, ".local", "state", "kennel")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("kennel-state-%d", os.Geteuid()))
}

// Server is the daemon: its sessions, its HTTP API and its socket. Its methods are safe
// for concurrent use.
type Server struct {
	opts    Options
	log     *slog.Logger
	bundle  string
	reg     *registry
	metrics *metrics
	mux     *http.ServeMux

	mu       sync.Mutex
	listener net.Listener
	http     *http.Server
	served   bool
}

// New checks opts and the state directory (created 0700, and set to 0700 at each start)
// and returns a Server that serves nothing yet.
func New(opts Options) (*Server, error) {
	if opts.Socket == "" {
		opts.Socket = DefaultSocket(os.Getenv)
	}
	if opts.StateDir == "" {
		opts.StateDir = DefaultStateDir(os.Getenv)
	}
	if opts.Setup == nil {
		opts.Setup = DefaultSetup()
	}
	if opts.StopWait == 0 {
		opts.StopWait = 15 * time.Second
	}
	if opts.ShutdownGrace == 0 {
		opts.ShutdownGrace = 10 * time.Second
	}
	if opts.PeerUID == 0 {
		opts.PeerUID = os.Geteuid()
	}
	if opts.PeerUID < 0 {
		return nil, fmt.Errorf("new daemon: %w: peer uid %d", errInvalid, opts.PeerUID)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := PrepareStateDir(opts.StateDir); err != nil {
		return nil, err
	}
	b, err := images.Stub()
	if err != nil {
		return nil, fmt.Errorf("new daemon: %w", err)
	}
	s := &Server{opts: opts, log: log, bundle: b.Hash(), reg: newRegistry()}
	s.metrics = newMetrics(s.reg)
	s.mux = http.NewServeMux()
	for _, r := range s.routes() {
		s.mux.HandleFunc(r.method+" "+r.pattern, r.handler)
	}
	return s, nil
}

// Socket is the socket path the server listens on (or will).
func (s *Server) Socket() string { return s.opts.Socket }

// StateDir is the server's state directory.
func (s *Server) StateDir() string { return s.opts.StateDir }

// Handler is the API's HTTP handler, without the socket and peer checks; Serve and
// ServeListener put it behind them.
func (s *Server) Handler() http.Handler { return s.mux }

// Serve binds the socket (Listen) and serves until ctx ends, then shuts down gracefully
// (Shutdown): no new connection is accepted, every session ends, and the socket file is
// removed. It returns nil after a shutdown caused by ctx.
func (s *Server) Serve(ctx context.Context) error {
	l, err := Listen(ctx, s.opts.Socket)
	if err != nil {
		return err
	}
	return s.ServeListener(ctx, l)
}

// ServeListener serves on l, behind a PeerListener that accepts only Options.PeerUID,
// until ctx ends; then it shuts down like Serve. l is closed on return. A server serves
// once.
func (s *Server) ServeListener(ctx context.Context, l net.Listener) error {
	pl := &PeerListener{Listener: l, UID: s.opts.PeerUID, Logger: s.log, OnRefuse: s.metrics.peerRefused}
	hs := &http.Server{Handler: s.mux, ReadHeaderTimeout: 30 * time.Second}
	s.mu.Lock()
	if s.served {
		s.mu.Unlock()
		_ = l.Close()
		return errors.New("serve: the server has served already")
	}
	s.served, s.listener, s.http = true, l, hs
	s.mu.Unlock()

	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(pl) }()
	select {
	case err := <-errc:
		s.shutdown(context.WithoutCancel(ctx))
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		s.shutdown(context.WithoutCancel(ctx))
		<-errc
		return nil
	}
}

// Shutdown stops accepting, ends every session and waits for requests in flight at
// most Options.ShutdownGrace (then closes their connections). The socket file is removed.
func (s *Server) Shutdown(ctx context.Context) {
	s.shutdown(ctx)
}

func (s *Server) shutdown(ctx context.Context) {
	s.mu.Lock()
	hs, l := s.http, s.listener
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.opts.ShutdownGrace)
	defer cancel()
	done := make(chan struct{})
	if hs != nil {
		go func() {
			defer close(done)
			if hs.Shutdown(ctx) != nil {
				_ = hs.Close()
			}
		}()
	} else {
		close(done)
	}
	var wg sync.WaitGroup
	for _, e := range s.reg.closeAll() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.endSession(ctx, e)
		}()
	}
	wg.Wait()
	<-done
	if l != nil {
		_ = l.Close()
		if ul, ok := l.(*net.UnixListener); ok {
			_ = os.Remove(ul.Addr().String())
		}
	}
}

// endSession closes e's session and frees its setup; the metrics count its jobs' bytes.
func (s *Server) endSession(ctx context.Context, e *entry) {
	e.mu.Lock()
	already := e.closed
	e.closed = true
	e.mu.Unlock()
	if already {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	if err := e.sess.Close(cctx); err != nil {
		s.log.Warn("session close", "session", e.id, "err", err)
	}
	for _, id := range e.jobList() {
		if j, ok := e.sess.Jobs().Job(id); ok {
			s.account(e, j)
		}
	}
	if e.release != nil {
		e.release()
	}
	s.metrics.sessionEnded()
}
