package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/launch"
	"github.com/kennel-dev/kennel/sessionspec"
	"github.com/kennel-dev/kennel/store"
	"github.com/kennel-dev/kennel/transports"
)

// Options configure a Server. Every zero value is documented and usable.
type Options struct {
	// Socket is the unix socket's path. Empty means DefaultSocket(os.Getenv).
	Socket string
	// StateDir is the daemon's private state directory (job output spills, workspaces).
	// Empty means DefaultStateDir(os.Getenv).
	StateDir string
	// Kit assembles sessions and holds what they share (the engine client, ssh
	// connections). Nil means a Kit of the server's own (launch.New with zero options),
	// closed when the server shuts down; a Kit given here is the caller's to close.
	Kit *launch.Kit
	// Assemble is the session assembly. Nil means Kit.Assemble.
	Assemble AssembleFunc
	// Default gives the transport of a session created without one. Nil means a local
	// kernel; kennel serve passes FromSettings.
	Default DefaultFunc
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
	// Timeouts bound how long a connection may hold the daemon without progress. Each
	// zero field means its default.
	Timeouts Timeouts
	// StopKernels ends every session's kernel at shutdown (kennel serve --stop-kernels).
	// Otherwise a shutdown lets each kernel that can outlive the daemon (a detached one)
	// run on for its grace, and the next daemon on the same state directory resumes its
	// session; sessions whose kernels cannot are ended.
	StopKernels bool
}

// KernelRunDir is where a daemon on state directory dir keeps its detached kernels' run
// directories (launch.Options.RunDir of the Kit it is given).
func KernelRunDir(dir string) string { return filepath.Join(dir, "run") }

// Timeouts bound how long a client may hold a connection without making progress. They
// bound stalls, never a reply: a cell reply may wait its whole budget before its first
// byte, and a streamed one lasts as long as its cell.
type Timeouts struct {
	// Header bounds reading a request's line and headers, from the connection's start
	// (on a kept connection, from the next request's first bytes); a client slower than
	// that has its connection closed unanswered. Zero means DefaultHeaderTimeout.
	Header time.Duration
	// Body bounds reading a request's body, from the handler's start to the body's last
	// byte; a body not in by then is answered 408 timeout and its connection closed. Zero
	// means DefaultBodyTimeout.
	Body time.Duration
	// Idle closes a keep-alive connection that starts no next request within it. Zero
	// means DefaultIdleTimeout.
	Idle time.Duration
	// WriteStall bounds each write to a connection: a client that takes none of a reply
	// for this long has its connection closed. Zero means DefaultWriteStall.
	WriteStall time.Duration
}

// The defaults of Options.Timeouts.
const (
	// DefaultHeaderTimeout bounds a request's line and headers: a few hundred bytes that a
	// local client writes at once.
	DefaultHeaderTimeout = 10 * time.Second
	// DefaultBodyTimeout bounds a request's body: the largest a route takes (32 MiB, a
	// cell) crosses the unix socket in well under a second.
	DefaultBodyTimeout = 30 * time.Second
	// DefaultIdleTimeout closes idle keep-alive connections. It is longer than the client
	// package's idle timeout (90 s), so a client drops an idle connection before the
	// daemon closes it under a request being sent.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultWriteStall bounds a write the client does not take: it is set before each
	// write, so it ends a connection whose client stopped reading, and no reply that
	// keeps moving.
	DefaultWriteStall = time.Minute
)

// withDefaults returns t with each zero field set to its default.
func (t Timeouts) withDefaults() Timeouts {
	t.Header = cmp.Or(t.Header, DefaultHeaderTimeout)
	t.Body = cmp.Or(t.Body, DefaultBodyTimeout)
	t.Idle = cmp.Or(t.Idle, DefaultIdleTimeout)
	t.WriteStall = cmp.Or(t.WriteStall, DefaultWriteStall)
	return t
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
	handler http.Handler // the routes behind the router and the body deadline
	hosts   *hostProbes  // the host probes' records; shutdown ends the probes in flight

	ownKit  bool // opts.Kit is the server's own, closed at shutdown
	store   *store.Store
	records sync.WaitGroup // jobs' records being written at their ends (shutdown waits)

	mu       sync.Mutex
	listener net.Listener
	http     *http.Server
	served   bool
}

// New checks opts and the state directory (created 0700, and set to 0700 at each start)
// and returns a Server that serves nothing yet.
func New(opts Options) (_ *Server, err error) {
	opts.Socket = cmp.Or(opts.Socket, DefaultSocket(os.Getenv))
	opts.StateDir = cmp.Or(opts.StateDir, DefaultStateDir(os.Getenv))
	if opts.StateDir, err = filepath.Abs(opts.StateDir); err != nil {
		return nil, fmt.Errorf("new daemon: state directory: %w", err)
	}
	ownKit := opts.Kit == nil
	if ownKit {
		opts.Kit = launch.New(launch.Options{RunDir: KernelRunDir(opts.StateDir)})
	}
	if opts.Assemble == nil {
		opts.Assemble = opts.Kit.Assemble
	}
	if opts.Default == nil {
		opts.Default = func(string) (*sessionspec.Transport, []string, error) { return nil, nil, nil }
	}
	opts.StopWait = cmp.Or(opts.StopWait, 15*time.Second)
	opts.ShutdownGrace = cmp.Or(opts.ShutdownGrace, 10*time.Second)
	opts.PeerUID = cmp.Or(opts.PeerUID, os.Geteuid())
	if opts.PeerUID < 0 {
		return nil, fmt.Errorf("new daemon: %w: peer uid %d", errInvalid, opts.PeerUID)
	}
	t := opts.Timeouts
	if t.Header < 0 || t.Body < 0 || t.Idle < 0 || t.WriteStall < 0 {
		return nil, fmt.Errorf("new daemon: %w: negative timeout in %+v", errInvalid, t)
	}
	opts.Timeouts = t.withDefaults()
	log := cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	if err := PrepareStateDir(opts.StateDir); err != nil {
		return nil, err
	}
	b, err := images.Stub()
	if err != nil {
		return nil, fmt.Errorf("new daemon: %w", err)
	}
	st, err := store.Open(store.DefaultPath(opts.StateDir))
	if err != nil {
		return nil, fmt.Errorf("new daemon: %w", err)
	}
	s := &Server{opts: opts, log: log, bundle: b.Hash(), reg: newRegistry(), ownKit: ownKit, store: st}
	s.hosts = newHostProbes(func() *launch.Kit { return s.opts.Kit })
	s.metrics = newMetrics(s.reg, opts.Kit.PoolStats, log)
	s.handler = bodyDeadline(newRouter(s.routes()), opts.Timeouts.Body)
	return s, nil
}

// Socket is the socket path the server listens on (or will).
func (s *Server) Socket() string { return s.opts.Socket }

// Handler is the API's HTTP handler, with its JSON 404 and 405 replies and its body
// timeout (Timeouts.Body), but without the socket and peer checks and the connection's
// timeouts (header, idle, write stall); Serve and ServeListener put it behind them.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve binds the socket (Listen) and serves until ctx ends, then shuts down gracefully
// (Shutdown): no new connection is accepted, every session and every host probe in
// flight ends, and the socket file is removed. It returns nil after a shutdown caused by
// ctx.
func (s *Server) Serve(ctx context.Context) error {
	l, err := Listen(ctx, s.opts.Socket)
	if err != nil {
		return err
	}
	return s.ServeListener(ctx, l)
}

// ServeListener serves on l, behind a PeerListener that accepts only Options.PeerUID and
// under Options.Timeouts, until ctx ends; then it shuts down like Serve. l is closed on
// return. A server serves once.
func (s *Server) ServeListener(ctx context.Context, l net.Listener) error {
	pl := &PeerListener{Listener: l, UID: s.opts.PeerUID, Logger: s.log, OnRefuse: s.metrics.peerRefused}
	hs := &http.Server{
		Handler:                      s.handler,
		ReadHeaderTimeout:            s.opts.Timeouts.Header,
		IdleTimeout:                  s.opts.Timeouts.Idle,
		DisableGeneralOptionsHandler: true, // OPTIONS * is a request like any other: 404
	}
	s.mu.Lock()
	if s.served {
		s.mu.Unlock()
		_ = l.Close()
		return errors.New("serve: the server has served already")
	}
	s.served, s.listener, s.http = true, l, hs
	s.mu.Unlock()

	// The pools start before the sweep, which keeps their containers (their instance's).
	if err := s.opts.Kit.StartPools(ctx, s.log); err != nil {
		s.Shutdown(context.WithoutCancel(ctx))
		return fmt.Errorf("serve: %w", err)
	}
	s.restore(ctx)
	s.sweep(ctx)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(stallListener{Listener: pl, stall: s.opts.Timeouts.WriteStall}) }()
	select {
	case err := <-errc:
		s.Shutdown(context.WithoutCancel(ctx))
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
		s.Shutdown(context.WithoutCancel(ctx))
		<-errc
		return nil
	}
}

// Shutdown stops accepting, ends every session and every host probe in flight (each
// reads unreachable, naming the shutdown; a probe asked for afterwards is 503
// unavailable), and waits for requests in flight at most Options.ShutdownGrace (then
// closes their connections). The socket file is removed.
func (s *Server) Shutdown(ctx context.Context) {
	s.mu.Lock()
	hs, l := s.http, s.listener
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.opts.ShutdownGrace)
	defer cancel()
	var wg sync.WaitGroup
	if hs != nil {
		wg.Go(func() {
			if hs.Shutdown(ctx) != nil {
				_ = hs.Close()
			}
		})
	}
	wg.Go(s.hosts.close)
	for _, e := range s.reg.closeAll() {
		wg.Go(func() {
			if s.opts.StopKernels || !s.detachSession(ctx, e) {
				s.endSession(ctx, e)
			}
		})
	}
	wg.Wait()
	s.records.Wait() // every job has ended or been let go: its record is written
	if err := s.store.Close(); err != nil {
		s.log.Warn("closing the state store", "err", err)
	}
	if s.ownKit {
		if err := s.opts.Kit.Close(); err != nil {
			s.log.Warn("closing the session kit", "err", err)
		}
	}
	if l != nil {
		_ = l.Close()
		if ul, ok := l.(*net.UnixListener); ok {
			_ = os.Remove(ul.Addr().String())
		}
	}
}

// dockerSweepTimeout bounds the Docker sweep at a daemon's start.
const dockerSweepTimeout = 30 * time.Second

// sweep removes what sessions the daemon no longer has left behind, before it serves:
// their spill files (controller.SweepOutput; a daemon starts with no session), and, in
// the background, the Docker containers of controllers of this host that are gone (with
// no engine reachable this is a debug line, not a failure).
func (s *Server) sweep(ctx context.Context) {
	if n, err := controller.SweepOutput(s.opts.StateDir, func(id string) bool { _, ok := s.reg.get(id); return ok }); err != nil {
		s.log.Warn("removing the spill files of sessions gone", "removed", n, "err", err)
	} else if n > 0 {
		s.log.Info("removed the spill files of sessions gone", "sessions", n)
	}
	go func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dockerSweepTimeout)
		defer cancel()
		res, err := s.opts.Kit.SweepDocker(sctx, s.heldContainers())
		switch {
		case errors.Is(err, transports.ErrUnavailable):
			s.log.Debug("docker sweep skipped: no engine", "err", err)
		case err != nil:
			s.log.Warn("docker sweep", "err", err)
		case len(res.Removed) > 0:
			s.log.Info("docker sweep: removed the containers of controllers that are gone", "removed", len(res.Removed), "kept", res.Kept)
		}
	}()
}

// heldContainers says which containers the store's kernel records name: the detached
// Docker kernels a session still has. It reads the store once, when called; with a
// store that cannot be read it holds every container (nothing is removed).
func (s *Server) heldContainers() func(string) bool {
	recs, err := s.store.Sessions()
	if err != nil {
		s.log.Warn("docker sweep: reading the store", "err", err)
		return func(string) bool { return true }
	}
	held := map[string]bool{}
	for _, r := range recs {
		if k := r.Kernel; k != nil && k.Transport == "docker" && k.Where != "" {
			held[k.Where] = true
		}
	}
	return func(id string) bool {
		if held[id] {
			return true
		}
		for w := range held { // a record may hold a short id
			if strings.HasPrefix(id, w) {
				return true
			}
		}
		return false
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
	if err := s.store.Delete(e.id); err != nil {
		s.log.Warn("forgetting the session", "session", e.id, "err", err)
	}
	_ = os.RemoveAll(s.jobsDir(e.id))
	s.metrics.sessionEnded()
}

// detachSession lets e's kernel run on without the daemon and keeps the session's record
// (with its kernel's, or a resume still pending), for the next daemon to resume; false
// when its transport cannot reattach, a session the caller ends instead.
func (s *Server) detachSession(ctx context.Context, e *entry) bool {
	if !e.resumable {
		return false
	}
	e.mu.Lock()
	already := e.closed
	e.closed, e.detaching = true, true
	e.mu.Unlock()
	if already {
		return true
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	rec, ok, err := e.sess.Detach(cctx)
	if err != nil {
		s.log.Warn("session detach", "session", e.id, "err", err)
	}
	// Kept either way: with its kernel's record, or (no kernel ran) without one, so the
	// next daemon serves the session with a fresh kernel.
	if err := s.store.Update(e.id, func(st *store.Session) error {
		st.Kernel = nil
		if ok {
			st.Kernel = &rec
		}
		return nil
	}); err != nil {
		s.log.Warn("keeping the detached session's record", "session", e.id, "err", err)
	}
	if e.release != nil {
		e.release()
	}
	s.metrics.sessionEnded()
	return true
}

// bodyDeadline bounds the reading of each request's body by h to d from the handler's
// start; a read past it fails with an error that wraps os.ErrDeadlineExceeded and names
// d. A request without a body is left alone.
//
// http.Server.ReadTimeout is not used: its deadline stays on the connection through the
// handler, and when it passes, the server's read that watches for the client going away
// fails and ends the request's context: a cell would fail ReadTimeout after its request
// began. Here the deadline is lifted as soon as the body reaches its end. That watching
// read starts at that end, just before the lift, so a body that ends within a hair of
// the deadline may still end its request's context.
func bodyDeadline(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			// The server's own writer sets deadlines itself; any other (a wrapper) is
			// reached through a ResponseController, which unwraps it.
			rd, ok := w.(readDeadliner)
			if !ok {
				rd = http.NewResponseController(w)
			}
			if rd.SetReadDeadline(time.Now().Add(d)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rd: rd, d: d}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// readDeadliner sets the read deadline of a request's connection (net/http's
// ResponseWriter, http.ResponseController).
type readDeadliner interface{ SetReadDeadline(time.Time) error }

// deadlineBody is a request body read under a deadline of d.
type deadlineBody struct {
	io.ReadCloser
	rd     readDeadliner
	d      time.Duration
	lifted bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == nil:
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = fmt.Errorf("not received within %v: %w", b.d, err)
	case errors.Is(err, io.EOF) && !b.lifted:
		b.lifted = true
		_ = b.rd.SetReadDeadline(time.Time{})
	}
	return n, err
}

// stallListener hands out its connections as stallConns.
type stallListener struct {
	net.Listener
	stall time.Duration
}

func (l stallListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &stallConn{Conn: c, stall: l.stall}, nil
}

// stallChunk is the most a stallConn writes under one deadline.
const stallChunk = 64 << 10

// stallConn writes in pieces of at most stallChunk bytes and sets its write deadline
// stall ahead before each, so a client that takes no piece within stall has the write
// fail (and the server closes the connection), while a reply that keeps moving, however
// slowly and for however long, is never cut. It overrides any write deadline set through
// it before a write.
type stallConn struct {
	net.Conn
	stall time.Duration
}

func (c *stallConn) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		piece := p[:min(len(p), stallChunk)]
		_ = c.Conn.SetWriteDeadline(time.Now().Add(c.stall))
		n, err := c.Conn.Write(piece)
		written += n
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}

// CloseWrite shuts the connection's writing side, as http.Server does to a client whose
// large body it did not read, before closing.
func (c *stallConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
