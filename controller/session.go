package controller

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"github.com/kennel-dev/kennel/output"
	"github.com/kennel-dev/kennel/protocol"
	"github.com/kennel-dev/kennel/transports"
)

// Errors a caller decides on with errors.Is.
var (
	// ErrClosed: the session was closed or killed.
	ErrClosed = errdefs.ErrConflict.WithMessage("session closed")
	// ErrKernelExited: the kernel ended while work was in flight (it crashed, was killed,
	// or was replaced after a protocol fault; a *gate.ProtocolFault is then in the chain).
	ErrKernelExited = errdefs.ErrUnavailable.WithMessage("kernel exited")
	// ErrNoWorkingDir and its siblings: a session start named a bad working directory.
	ErrNoWorkingDir     = errdefs.ErrInvalidArgument.WithMessage("a session needs a working directory")
	ErrWorkingDirGone   = errdefs.ErrInvalidArgument.WithMessage("working directory is gone")
	ErrWorkingDirNotDir = errdefs.ErrInvalidArgument.WithMessage("working directory is not a directory")
	// ErrStale: the kernel runs another stub bundle or protocol than this controller.
	ErrStale = errdefs.ErrUnavailable.WithMessage("kernel is stale")
	// ErrKernelUnreachable: the kernel's link is out of reach (a host partitioned); the
	// kernel may still run, and work in flight ends without its result. The session keeps
	// reaching for the kernel (Reattaching) and starts no fresh one meanwhile.
	ErrKernelUnreachable = errdefs.ErrUnavailable.WithMessage("kernel out of reach")
	// ErrDetached: the session let its kernel go (Detach); the kernel runs on, and work in
	// flight ends for this controller without its result.
	ErrDetached = errdefs.ErrUnavailable.WithMessage("session detached from its kernel")
)

// HostHandler serves the host requests a kernel sends (fs.*, ...). Serve runs on its own
// goroutine per request and may block; ctx ends when the kernel that asked is gone.
// An error that has a method Code() string crosses to the kernel with that code; others
// cross as "internal".
type HostHandler interface {
	// Serves reports whether Serve handles requests of type typ. It must be fast and must
	// not change over a session's life.
	Serves(typ string) bool
	// Serve handles one request; its result is marshalled to JSON as the reply's result.
	Serve(ctx context.Context, typ string, args json.RawMessage) (any, error)
}

// Options configure a session. Transport and Dir are required; every other zero value is
// documented on its field.
type Options struct {
	// Transport starts the session's kernels.
	Transport transports.Transport
	// Dir is the session's working directory on the host: it must exist and be a directory.
	Dir string
	// RemoteDir reports that Dir is a path on the kernel's own host (a remote workspace
	// "[user@]host:/path" of the ssh transport), not on this machine: Start does not check
	// it here; the transport and the remote file handlers do.
	RemoteDir bool
	// SandboxDir is the working directory inside the sandbox (Dir mapped by the path map).
	// Empty means Dir itself (an identity map).
	SandboxDir string
	// Env holds extra environment entries for the kernel ("KEY=VALUE"), already mapped.
	Env []string
	// KernelMemory caps the kernel's resident memory, in bytes: a guard in the kernel
	// samples it every 100 ms while cells run and interrupts a cell past it (its result
	// has Reason "memory"), keeping the namespace. Zero means DefaultKernelMemory
	// (256 MiB); negative, no cap. It is a sampled guard, not an allocator limit: the
	// sandbox's own memory limit (container, cgroup) stays the hard bound.
	KernelMemory int64
	// Python is the interpreter inside the sandbox (transports.Spec.Python). Empty means
	// the transport's default ("python3", resolved as the transport documents).
	Python string
	// Handler serves host requests. Nil serves none: every request gets "unserved".
	Handler HostHandler
	// Logger receives diagnostics. Nil discards them.
	Logger *slog.Logger
	// Bundle is the stub bundle hash the kernel must report in its hello. Empty skips the
	// check.
	Bundle string
	// StartTimeout bounds a kernel's start to its hello. Zero means 30 s.
	StartTimeout time.Duration
	// BlockingBudget bounds a @remote call (Session.Call): past it the call answers
	// timeout. Zero means DefaultBlockingBudget (60 s).
	BlockingBudget time.Duration
	// InterruptGrace is how long a cancelled cell may take to end after its interrupt before
	// its kernel is killed. Zero means 5 s.
	InterruptGrace time.Duration
	// Truncation bounds what a settled job (shell or cell) reports; JobOptions may override
	// it per job. The zero value is the default: On, 50 KiB and 2000 lines, head.
	Truncation output.Truncation
	// StateDir is the session's private state directory on the host (created 0700; it
	// must be owned by the user and private). Job output spills to its "output"
	// subdirectory, where files older than 14 days are pruned when a session starts.
	// Empty means DefaultStateDir().
	StateDir string
	// JobKillGrace is how long a killed shell job of a kernel with transports.HostGroups
	// (a local kernel) may take to end before the controller kills its process group
	// itself, and then how long before it ends the job itself when the kernel still has
	// not reported the end. Zero means 2 s.
	JobKillGrace time.Duration
	// OnGateDecision, when set, is told of every host request the gate decided on:
	// "accepted", or the refusal's code ("too_large", "unserved", "no_type", "duplicate").
	// It runs on the kernel's reader goroutine and must not block (a counter, say).
	OnGateDecision func(decision string)
	// OnKernelEnd, when set, is told when a kernel generation ends and why (nil: a clean
	// exit); it runs on the reader goroutine and must not block.
	OnKernelEnd func(info transports.Info, cause error)

	// ID is the session's id. Empty means a new random one; a session restored after a
	// restart keeps its own.
	ID string
	// IDBase is the number cell and job ids follow: they count from IDBase+1. A kernel
	// keeps its newest cells' ids (it answers a known id with that cell's end), so a
	// session that reattaches to a kernel an earlier controller used must give ids past
	// every one that controller gave: its IDBase is past them.
	IDBase uint64
	// Resume, when set, is the record of a detached kernel an earlier controller let go
	// of: the first kernel is reached again through the Transport (which must be a
	// transports.Reattacher) instead of started. A kernel proven gone (errdefs.ErrNotFound)
	// is replaced by a fresh one, and Origin says the namespace was lost and why; any
	// other failure to reattach fails Start (the kernel may still run).
	Resume *transports.Record
	// Background makes Start return without waiting for the first kernel: it is started,
	// or Resume's kernel reattached, in the background, and calls that need it wait for
	// it (Reattaching reports the wait). A resume whose kernel is out of reach
	// (errdefs.ErrUnavailable: a host, an engine) is retried, backing off to every 30 s,
	// for ResumeFor; cells fail with that error meanwhile, and no fresh kernel replaces one
	// that may still run.
	Background bool
	// ResumeFor bounds how long a resume out of reach is retried: past it the kernel has
	// surely ended by its own grace, the record is forgotten without reaching for its
	// host, and Origin says so. Zero means the record's Grace and a minute (an hour and a
	// minute when the record does not say).
	ResumeFor time.Duration
	// OnKernel, when set, is told the record of each kernel generation that can be
	// reattached (a transports.Detachable kernel) once its hello was checked, before
	// Start or the call that started it returns: what a store keeps. It must not block.
	OnKernel func(rec transports.Record)
	// OnJob, when set, is given the record of each shell job before the kernel is told to
	// run it: what a store keeps so a later controller can pick the job up (ResumeJobs).
	// An error refuses the job (RunJob returns it, wrapped) and nothing runs.
	OnJob func(rec JobRecord) error
	// ResumeJobs are the shell jobs an earlier controller started in Resume's kernel
	// (their OnJob records): each is in the job table from Start on, under its id, its
	// output read again from its files; it is carried on by the reattached kernel, or
	// ends (ErrJobEndUnseen, ErrKernelExited) when the kernel ended meanwhile or is gone.
	ResumeJobs []JobRecord
}

// Origin says how a session's first kernel came to be.
type Origin struct {
	// Resumed: the first kernel is the one Options.Resume recorded, namespace and all.
	Resumed bool
	// Lost, when Options.Resume was set but its kernel was gone, says why; the session
	// runs a fresh kernel with a fresh namespace.
	Lost error
}

// Session is one kernel session. Its methods are safe for concurrent use.
type Session struct {
	id   string
	opts Options
	log  *slog.Logger

	ids    atomic.Uint64 // cell ids
	jobs   jobSet        // shell and cell jobs, set up by Start
	events hub           // what Subscribe tells of

	// generations counts the kernel generations whose reader has not yet killed and
	// reaped its kernel; Close waits for them all, so no kernel outlives its session.
	generations sync.WaitGroup

	mu       sync.Mutex
	kc       *kernelConn // the current kernel, nil before start or after it ended
	closed   bool
	cause    error              // why the session was closed
	closedCh chan struct{}      // closed with closed
	resume   *transports.Record // the kernel the first start reattaches to, until reached or given up
	resumeBy time.Time          // when a resume out of reach is given up

	cur        atomic.Pointer[kernelConn] // s.kc, read without s.mu
	attaching  atomic.Bool                // the background start or resume is under way
	originMu   sync.Mutex
	origin     Origin
	notice     *UpgradeNotice // an upgrade's notice for the next cell's result (originMu)
	lostNotice string         // the namespace-lost notice for the next cell's result (originMu)
	lostTold   bool           // lostNotice was made (s.mu)
}

// Start validates opts, starts the first kernel and waits for its hello.
func Start(ctx context.Context, opts Options) (*Session, error) {
	if opts.Transport == nil {
		return nil, errors.New("start session: no transport")
	}
	if opts.RemoteDir {
		if opts.Dir == "" {
			return nil, ErrNoWorkingDir
		}
	} else if err := CheckWorkingDir(opts.Dir); err != nil {
		return nil, err
	}
	opts.SandboxDir = cmp.Or(opts.SandboxDir, opts.Dir)
	opts.StartTimeout = cmp.Or(opts.StartTimeout, 30*time.Second)
	opts.InterruptGrace = cmp.Or(opts.InterruptGrace, 5*time.Second)
	log := cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	s := &Session{id: opts.ID, opts: opts, closedCh: make(chan struct{})}
	if s.id == "" {
		s.id = newID() // only then: cmp.Or would read crypto/rand for every session
	}
	s.ids.Store(opts.IDBase)
	s.log = log.With("session", s.id)
	s.resume = opts.Resume
	if opts.Resume != nil {
		s.resumeBy = time.Now().Add(resumeFor(s.opts.ResumeFor, *opts.Resume))
	}
	if err := s.initJobs(ctx); err != nil {
		return nil, err
	}
	if opts.Background {
		s.attaching.Store(true)
		go s.startInBackground()
		return s, nil
	}
	if _, err := s.kernel(ctx, false); err != nil {
		s.removeSpill()
		return nil, err
	}
	return s, nil
}

// resumeFor is how long a resume of rec out of reach is tried: Options.ResumeFor when
// set, else the kernel's own grace and a minute (then an hour and a minute).
func resumeFor(set time.Duration, rec transports.Record) time.Duration {
	if set > 0 {
		return set
	}
	if rec.Grace > 0 {
		return rec.Grace + time.Minute
	}
	return time.Hour + time.Minute
}

// resumeBackoff paces the retries of a resume whose kernel is out of reach.
var resumeBackoff = struct{ first, max time.Duration }{time.Second, 30 * time.Second}

// startInBackground starts (or resumes) the first kernel of a Background session,
// retrying a resume out of reach until it is reached, proven gone or given up.
func (s *Session) startInBackground() {
	defer s.attaching.Store(false)
	delay := resumeBackoff.first
	for {
		_, err := s.kernel(context.Background(), true)
		s.mu.Lock()
		pending, closed := s.resume != nil, s.closed
		s.mu.Unlock()
		if err == nil || !pending || closed {
			if err != nil {
				s.log.Warn("the session's first kernel did not start; the next cell tries again", "err", err)
			}
			return
		}
		s.log.Info("the kernel to resume is out of reach; trying again", "in", delay, "err", err)
		select {
		case <-time.After(delay):
		case <-s.closedCh:
			return
		}
		delay = min(2*delay, resumeBackoff.max)
	}
}

// outOfReach makes the kernel of rec, whose link is out of reach, the one to resume:
// retried in the background for ResumeFor from since (when its connection was lost), and
// no fresh kernel started meanwhile.
func (s *Session) outOfReach(rec transports.Record, since time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.resume != nil {
		return
	}
	s.kernelState(KernelReattaching, 0, nil)
	s.resume = &rec
	s.resumeBy = since.Add(resumeFor(s.opts.ResumeFor, rec))
	if s.attaching.CompareAndSwap(false, true) {
		go s.startInBackground()
	}
}

// Reattaching reports that the session's kernel is being started or resumed in the
// background: its first one (Options.Background), or one whose link went out of reach.
func (s *Session) Reattaching() bool { return s.attaching.Load() }

// CheckWorkingDir returns nil if dir names an existing directory, and otherwise one of
// ErrNoWorkingDir, ErrWorkingDirGone or ErrWorkingDirNotDir, wrapped with the path.
func CheckWorkingDir(dir string) error {
	if dir == "" {
		return ErrNoWorkingDir
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: %s", ErrWorkingDirGone, dir)
	case err != nil:
		return fmt.Errorf("working directory %s: %w", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("%w: %s", ErrWorkingDirNotDir, dir)
	}
	return nil
}

// ID is the session's id.
func (s *Session) ID() string { return s.id }

// Origin says whether the first kernel was the one Options.Resume recorded, and when it
// was not, why its namespace was lost.
func (s *Session) Origin() Origin {
	s.originMu.Lock()
	defer s.originMu.Unlock()
	return s.origin
}

func (s *Session) setOrigin(f func(*Origin)) {
	s.originMu.Lock()
	defer s.originMu.Unlock()
	f(&s.origin)
}

// Record is the current kernel's record when it can be reattached (ok false when no
// kernel runs or its transport cannot detach).
func (s *Session) Record() (rec transports.Record, ok bool) {
	kc := s.cur.Load()
	if kc == nil || kc.ended() {
		return transports.Record{}, false
	}
	dk, ok := kc.k.(transports.Detachable)
	if !ok {
		return transports.Record{}, false
	}
	return dk.Record(), true
}

// Detach ends the session for this controller without ending its kernel: a kernel that
// can be let go (transports.Detachable) runs on alone for its grace, and Detach returns
// its record, from which a later controller resumes it (Options.Resume). Work in flight
// fails with ErrDetached; the session's spill directory is kept (a resumed session
// reads it). ok is false when there was no such kernel: none ran, or its transport cannot
// detach, in which case the session was closed as Close does.
func (s *Session) Detach(ctx context.Context) (rec transports.Record, ok bool, err error) {
	s.mu.Lock()
	kc := s.kc
	var dk transports.Detachable
	if kc != nil && !kc.ended() {
		dk, _ = kc.k.(transports.Detachable)
	}
	if pending := s.resume; dk == nil && pending != nil && !s.closed {
		// The kernel to resume was never reached: it is still the record's.
		s.mu.Unlock()
		return *pending, true, s.end(ctx, ErrDetached)
	}
	if dk == nil || s.closed {
		s.mu.Unlock()
		return transports.Record{}, false, s.end(ctx, ErrDetached)
	}
	s.closed = true
	s.cause = ErrDetached
	close(s.closedCh)
	kc.detached.Store(true)
	s.mu.Unlock()
	kc.fail(fmt.Errorf("session %s: %w", s.id, ErrDetached))
	err = dk.Detach()
	if werr := s.waitKernels(ctx, "detach"); werr != nil {
		err = errors.Join(err, werr)
	}
	return dk.Record(), true, err
}

// Done is closed once Close or Kill began ending the session.
func (s *Session) Done() <-chan struct{} { return s.closedCh }

// Kernel reports the current kernel's hello and transport facts, starting none. ok is false
// when no kernel runs.
func (s *Session) Kernel() (hello protocol.Hello, info transports.Info, ok bool) {
	kc := s.cur.Load()
	if kc == nil || kc.ended() {
		return protocol.Hello{}, transports.Info{}, false
	}
	return kc.hello, kc.k.Info(), true
}

// kernel returns the running kernel, starting one when there is none (the first start, or
// after the previous one ended). resumeOnly reaches only the kernel to resume, when there
// is one and no kernel runs, and starts no fresh one: a kernel found gone leaves the
// session without one (nil, Origin saying why) until a cell needs one.
func (s *Session) kernel(ctx context.Context, resumeOnly bool) (*kernelConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("session %s: %w", s.id, s.closedErr())
	}
	switch {
	case s.kc != nil && !s.kc.ended() && resumeOnly:
		return s.kc, nil
	case s.kc != nil && !s.kc.ended():
		return s.upgradeIfStale(ctx, s.kc), nil
	case resumeOnly && s.resume == nil:
		return nil, nil
	}
	kc, err := s.startKernel(ctx, resumeOnly)
	if err != nil || kc == nil {
		return nil, err
	}
	s.kc = kc
	s.cur.Store(kc)
	return kc, nil
}

func (s *Session) closedErr() error {
	if s.cause != nil {
		return fmt.Errorf("%w: %w", ErrClosed, s.cause)
	}
	return ErrClosed
}

// newID returns a random 12-hex-digit id.
func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// nextID returns a session-unique id with the given prefix ("c" cells; jobs take theirs
// from the job table).
func (s *Session) nextID(prefix string) string {
	return fmt.Sprintf("%s%d", prefix, s.ids.Add(1))
}

// Close ends the session: the kernel gets EOF on stdin and is killed after the grace if it
// does not exit. Work in flight fails with ErrClosed. Close waits for the end of every
// kernel the session started (an earlier one that is still being killed too) or ctx.
func (s *Session) Close(ctx context.Context) error {
	return s.end(ctx, nil)
}

// Kill ends the session like Close, recording cause as the reason.
func (s *Session) Kill(ctx context.Context, cause error) error {
	return s.end(ctx, cmp.Or(cause, errors.New("killed")))
}

func (s *Session) end(ctx context.Context, cause error) error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		s.cause = cause
		close(s.closedCh)
	}
	kc := s.kc
	s.mu.Unlock()
	var err error
	if kc != nil {
		kc.fail(fmt.Errorf("session %s: %w", s.id, s.closedErr()))
		err = kc.kill(ctx)
	}
	if werr := s.waitKernels(ctx, "close"); werr != nil {
		return errors.Join(err, werr)
	}
	s.removeSpill()
	return err
}

// waitKernels waits until every kernel the session started has ended, or ctx ends (an
// error naming op).
func (s *Session) waitKernels(ctx context.Context, op string) error {
	ended := make(chan struct{})
	go func() {
		s.generations.Wait()
		close(ended)
	}()
	select {
	case <-ended:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s session %s: kernels still ending: %w", op, s.id, context.Cause(ctx))
	}
}

// writeFrame encodes f and queues it whole for the kernel's stdin: it returns once the
// frame is queued (not written), waiting only while the queue to a kernel that does not
// read is full, until ctx ends (ErrStdinStalled). A frame over the line limit is refused
// (ErrFrameTooLarge) and nothing is sent.
func (kc *kernelConn) writeFrame(ctx context.Context, f protocol.HostFrame) error {
	line, err := protocol.MarshalLine(f)
	if err != nil {
		return err
	}
	if len(line) > protocol.MaxLine {
		return fmt.Errorf("%s frame of %d bytes: %w of %d bytes: nothing was sent", f.FrameType(), len(line), ErrFrameTooLarge, protocol.MaxLine)
	}
	if err := kc.stdin.send(ctx, line); err != nil {
		return fmt.Errorf("write %s frame: %w", f.FrameType(), err)
	}
	return nil
}
