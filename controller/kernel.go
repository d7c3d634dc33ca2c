package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/containerd/errdefs"
	"github.com/kennel-dev/kennel/controller/gate"
	"github.com/kennel-dev/kennel/link"
	"github.com/kennel-dev/kennel/protocol"
	"github.com/kennel-dev/kennel/transports"
	"golang.org/x/sync/semaphore"
)

// kernelConn is one kernel generation: the transport's Kernel, the gate reading its
// frames, and the work in flight on it.
type kernelConn struct {
	s      *Session
	k      transports.Kernel
	hello  protocol.Hello // set by the reader before ready; read only once ready
	stderr *headTail

	ctx    context.Context // ends when the kernel's reader ends; host requests run under it
	cancel context.CancelCauseFunc

	stdin *stdinWriter // whole frames to the kernel, never blocking a caller's control path
	// resumed: the kernel is one an earlier controller started (Options.Resume); its
	// hello may name another bundle, which makes it stale rather than refused.
	resumed bool
	// stale: the kernel runs another bundle than the controller's (Session.Stale).
	stale atomic.Bool
	// upgradeTried: its replacement at an idle moment was tried (s.mu guards it).
	upgradeTried bool
	// detached is set when the session let the kernel go (Session.Detach): its reader
	// then neither kills nor waits for it.
	detached atomic.Bool
	// ready is set once the kernel's hello was checked (protocol and bundle): no frame but
	// the hello (and log lines) is taken before, no host request is served before.
	ready atomic.Bool
	// inflight bounds the bytes of accepted host requests whose handlers have not replied:
	// past it the reader stops reading the kernel until a handler ends (see onRequest).
	inflight *semaphore.Weighted

	mu    sync.Mutex
	cells map[string]*cellRun
	// calls are the @remote calls in flight, by call id; functions the @remote functions
	// the kernel registered, by name.
	calls     map[string]*callRun
	functions map[string]Function
	jobs      kernelJobs // shell jobs; runs guarded by mu
	err       error      // set once when the generation ends: why
	done      chan struct{}

	helloCh chan protocol.Hello

	// streams decodes stream frames on the reader goroutine (onStream).
	streams protocol.StreamDecoder
}

// maxRequestBytesInFlight bounds the line bytes of accepted host requests being served at
// once: one request at the line limit, or any number of smaller ones within it. A request never waits when none is in flight, so
// every request the gate accepts is served; while the budget is spent the kernel's stdout
// is not read, and the kernel waits in its write. Each byte in flight costs a few in
// memory (the line, its decoded arguments, the handler's value): BENCHMARKS.md gives the
// measured peak of `kennel run` under a flood of requests at the line limit (338 MiB).
const maxRequestBytesInFlight = protocol.MaxLine

// startKernel starts a kernel generation (or reattaches the one to resume) and waits for
// its checked hello. s.mu is held. Whatever ends the generation later, its reader kills
// the kernel through the transport's ladder and reaps it (Session.Close waits for that).
// resumeOnly starts no fresh kernel: it returns nil (and no error) when there is no
// kernel to resume or it was gone.
func (s *Session) startKernel(ctx context.Context, resumeOnly bool) (*kernelConn, error) {
	stderr := newHeadTail(8 << 10)
	sctx, cancel := context.WithTimeout(ctx, s.opts.StartTimeout)
	defer cancel()
	k, err := s.reattach(sctx)
	if err != nil {
		return nil, err
	}
	resumed := k != nil
	if !resumed && s.resume == nil {
		s.endAdopted(s.jobs.adopted, cmp.Or(s.Origin().Lost, errors.New("its kernel was not resumed")))
		s.jobs.adopted = nil
	}
	if k == nil && resumeOnly {
		return nil, nil
	}
	if k == nil {
		if lost := s.Origin().Lost; lost != nil && !s.lostTold {
			s.lostTold = true
			s.originMu.Lock()
			s.lostNotice = fmt.Sprintf("the session's kernel was lost (%v): this cell runs in a fresh kernel, and the namespace before it is gone", lost)
			s.originMu.Unlock()
		}
		k, err = s.opts.Transport.Start(sctx, transports.Spec{
			SessionID: s.id,
			Dir:       s.opts.SandboxDir,
			Env:       s.kernelEnv(),
			Python:    s.opts.Python,
			Stderr:    stderr,
			JobOutDir: s.jobs.jobOutDir,
		})
		if err != nil {
			return nil, fmt.Errorf("start kernel: %w", err)
		}
	}
	kctx, kcancel := context.WithCancelCause(context.Background())
	kc := &kernelConn{
		s: s, k: k, stderr: stderr, resumed: resumed,
		ctx: kctx, cancel: kcancel,
		inflight:  semaphore.NewWeighted(maxRequestBytesInFlight),
		cells:     make(map[string]*cellRun),
		calls:     make(map[string]*callRun),
		functions: make(map[string]Function),
		jobs:      newKernelJobs(k),
		done:      make(chan struct{}),
		helloCh:   make(chan protocol.Hello, 1),
	}
	kc.stdin = newStdinWriter(k.Stdin(), kc.fail)
	if resumed {
		s.takeAdopted(sctx, kc)
	}
	s.generations.Add(1)
	go kc.read()

	select {
	case <-kc.helloCh: // kc.hello is set and checked
	case <-kc.done:
		err := kc.endErr()
		_ = kc.kill(context.WithoutCancel(ctx))
		if errors.Is(err, ErrStale) {
			return nil, fmt.Errorf("start kernel: %w", err)
		}
		return nil, fmt.Errorf("start kernel: no hello: %w%s", err, stderr.suffix())
	case <-sctx.Done():
		kc.fail(fmt.Errorf("start kernel: %w", context.Cause(sctx)))
		_ = kc.kill(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("start kernel: no hello within %v: %w%s", s.opts.StartTimeout, context.Cause(sctx), stderr.suffix())
	}
	s.log.Debug("kernel started", "transport", k.Info().Transport, "pid", kc.hello.PID, "python", kc.hello.Python)
	s.kernelState(KernelRunning, kc.hello.PID, nil)
	if resumed {
		kc.settleAdopted()
		go kc.reloadFunctions() // the earlier controller was told them; this one asks
	}
	if dk, ok := k.(transports.Detachable); ok && s.opts.OnKernel != nil {
		s.opts.OnKernel(dk.Record())
	}
	return kc, nil
}

// reattach reaches the kernel of Options.Resume, once: a nil Kernel (and no error) when
// there is none to reach, the record's kernel being gone (Origin.Lost says why). s.mu is
// held.
func (s *Session) reattach(ctx context.Context) (transports.Kernel, error) {
	rec := s.resume
	if rec == nil {
		return nil, nil
	}
	if time.Now().After(s.resumeBy) {
		s.resume = nil
		lost := fmt.Errorf("kernel %s: out of reach since this controller started, past its grace: %w: forgotten without reaching its host again", rec.Kernel, errdefs.ErrNotFound)
		s.setOrigin(func(o *Origin) { o.Lost = lost })
		s.log.Warn("giving up the kernel to resume; starting a fresh one", "kernel", rec.Kernel)
		return nil, nil
	}
	r, ok := s.opts.Transport.(transports.Reattacher)
	if !ok {
		s.resume = nil
		return nil, fmt.Errorf("resume kernel %s: transport %s cannot reattach: %w", rec.Kernel, s.opts.Transport.Name(), errdefs.ErrNotImplemented)
	}
	k, err := r.Reattach(ctx, *rec)
	switch {
	case errdefs.IsNotFound(err):
		s.resume = nil
		s.setOrigin(func(o *Origin) { o.Lost = err })
		s.log.Warn("the kernel to resume is gone; starting a fresh one", "kernel", rec.Kernel, "err", err)
		return nil, nil
	case errdefs.IsUnavailable(err) || errors.Is(err, context.DeadlineExceeded):
		// Out of reach is not gone: keep the record, start nothing in its place.
		return nil, fmt.Errorf("resume kernel %s: %w: %w", rec.Kernel, errdefs.ErrUnavailable, err)
	case err != nil:
		s.resume = nil
		s.setOrigin(func(o *Origin) { o.Lost = err })
		return nil, fmt.Errorf("resume kernel %s: %w", rec.Kernel, err)
	}
	s.resume = nil
	s.setOrigin(func(o *Origin) { o.Resumed = true })
	return k, nil
}

// checkHello decides on the kernel's hello: its protocol and bundle must be this
// controller's. It runs on the reader goroutine before any other frame is taken.
func (kc *kernelConn) checkHello(h protocol.Hello) error {
	if err := h.CheckVersion(); err != nil {
		return fmt.Errorf("%w: %w", ErrStale, err)
	}
	if b := kc.s.opts.Bundle; b != "" && h.Bundle != b {
		if kc.resumed {
			kc.stale.Store(true)
			kc.s.log.Info("the resumed kernel is stale: it is replaced at its next idle moment", "bundle", h.Bundle, "want", b)
			return nil
		}
		return fmt.Errorf("%w: it runs stub bundle %.12s, this controller has %.12s", ErrStale, h.Bundle, b)
	}
	return nil
}

// early refuses a frame that came before the kernel's checked hello: a kernel must say
// who it is before anything it sends takes effect. The generation ends with a protocol
// fault (the first one wins) and the kernel is killed; the frame has no effect.
func (kc *kernelConn) early(what string, line []byte) {
	fault := &gate.ProtocolFault{Reason: what + " before the kernel's hello", Head: append([]byte(nil), line[:min(len(line), 256)]...)}
	kc.fail(fmt.Errorf("%w: %w", ErrKernelExited, fault))
	go func() { _ = kc.k.Kill(context.Background()) }()
}

// read runs the gate over the kernel's stdout until it ends, then ends the generation,
// kills the kernel through its transport (whatever ended the reading: a fault, the end
// of its stdout with the process still running, a failed write) and reaps it.
func (kc *kernelConn) read() {
	defer kc.s.generations.Done()
	g := gate.New(gate.Config{
		Serves:       kc.serves,
		OnRequest:    kc.onRequest,
		OnRefusal:    kc.onRefusal,
		OnEvent:      kc.onEvent,
		OnDiagnostic: func(msg string) { kc.s.log.Warn("gate: " + msg) },
	})
	err := g.Run(kc.ctx, kc.k.Stdout())
	if kc.detached.Load() {
		kc.fail(ErrDetached)
		kc.stdin.stop(kc.endErr())
		return // let go: the kernel runs on, its end is another controller's to see
	}
	if dk, ok := kc.k.(transports.Detachable); ok && errdefs.IsUnavailable(err) && kc.ctx.Err() == nil {
		// Out of reach is not gone (a host partitioned, a link that ran out of tries):
		// the kernel is neither killed nor replaced; it is reached for again.
		kc.s.log.Warn("the kernel is out of reach; reaching for it again in the background", "err", err)
		kc.fail(fmt.Errorf("%w: %w", ErrKernelUnreachable, err))
		kc.stdin.stop(kc.endErr())
		since := time.Now()
		if l, ok := kc.k.(interface{ Link() *link.Client }); ok {
			if t := l.Link().DroppedAt(); !t.IsZero() {
				since = t // the kernel's grace began no later than this
			}
		}
		kc.s.outOfReach(dk.Record(), since)
		return
	}
	var fault *gate.ProtocolFault
	switch {
	case errors.As(err, &fault):
		// Replace the kernel loudly: fail what is in flight with the fault, kill it; the
		// next cell starts a fresh kernel.
		kc.s.log.Error("kernel broke the protocol; replacing it", "fault", fault.Error(), "pid", kc.hello.PID)
		kc.fail(fmt.Errorf("%w: %w", ErrKernelExited, fault))
	case err != nil && kc.ctx.Err() == nil:
		kc.fail(kc.withOOM(fmt.Errorf("%w: reading frames: %w", ErrKernelExited, err)))
	default:
		kc.fail(kc.withOOM(ErrKernelExited))
	}
	kc.stdin.stop(kc.endErr())
	kc.s.kernelState(KernelEnded, kc.hello.PID, kc.endErr())
	// The session no longer uses this kernel: end it, whatever it is doing.
	if kerr := kc.k.Kill(context.Background()); kerr != nil {
		kc.s.log.Warn("kernel kill", "err", kerr)
	}
	exit, werr := kc.k.Wait()
	if s := kc.s; s.opts.OnKernelEnd != nil {
		cause := kc.endErr()
		if exit.OOM && !errors.Is(cause, ErrOOM) {
			cause = fmt.Errorf("%w: %w", cause, ErrOOM)
		}
		if werr != nil {
			cause = errors.Join(cause, werr)
		}
		s.opts.OnKernelEnd(kc.k.Info(), cause)
	}
}

// fail ends the generation with err (the first call wins): every cell in flight fails with
// it, every shell job it runs ends (unknown end, err as the cause), and host requests in
// flight are cancelled.
func (kc *kernelConn) fail(err error) {
	kc.mu.Lock()
	if kc.err != nil {
		kc.mu.Unlock()
		return
	}
	kc.err = err
	cells := kc.cells
	kc.cells = map[string]*cellRun{}
	calls := kc.calls
	kc.calls = map[string]*callRun{}
	runs := kc.jobs.runs
	kc.jobs.runs = map[string]*jobRun{}
	close(kc.done)
	kc.mu.Unlock()
	kc.cancel(err)
	kc.stdin.stop(err)
	for _, c := range cells {
		c.finish(nil, err)
	}
	for _, c := range calls {
		c.finish(nil, &RemoteCallError{Code: CallUnreachable, Function: c.function, Err: err})
	}
	endJobs(runs, err)
}

func (kc *kernelConn) ended() bool {
	select {
	case <-kc.done:
		return true
	default:
		return false
	}
}

func (kc *kernelConn) endErr() error {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	return kc.err
}

// killWait bounds how long a call that ends a kernel itself (a cell past its interrupt
// grace, a failed start) waits for the end to be confirmed; the transport's ladder goes on
// climbing after, and the generation's reader reaps the kernel.
const killWait = 30 * time.Second

// kill ends the kernel: closes stdin (the stub's shutdown), then the transport's staged
// kill; it returns once the kernel's end is confirmed, or ctx ends, or killWait passed.
func (kc *kernelConn) kill(ctx context.Context) error {
	kc.fail(ErrKernelExited)
	ctx, cancel := context.WithTimeout(ctx, killWait)
	defer cancel()
	if err := kc.k.Kill(ctx); err != nil {
		return fmt.Errorf("kill kernel: %w", err)
	}
	return nil
}

func (kc *kernelConn) serves(typ string) bool {
	if typ == TypeRemoteRegister {
		return true
	}
	h := kc.s.opts.Handler
	return h != nil && h.Serves(typ)
}

// onRequest runs an accepted host request's handler on its own goroutine; its result or
// error is the request's one reply. A request before the checked hello is served by no
// handler (see early). While maxRequestBytesInFlight of requests are being served it
// waits for room on the reader goroutine: the kernel is not read meanwhile.
func (kc *kernelConn) onRequest(r gate.Request) {
	if !kc.ready.Load() {
		kc.early("host request", r.Line)
		return
	}
	if f := kc.s.opts.OnGateDecision; f != nil {
		f("accepted")
	}
	cost := int64(min(len(r.Line), maxRequestBytesInFlight))
	if !kc.inflight.TryAcquire(cost) {
		if err := kc.inflight.Acquire(kc.ctx, cost); err != nil {
			return // the generation ended: the kernel will get no reply, nor need one
		}
	}
	line := append([]byte(nil), r.Line...) // r.Line is the gate's buffer, valid only during this call
	go func() {
		defer kc.inflight.Release(cost)
		req, err := protocol.DecodeHostRequest(line)
		line = nil
		var result any
		switch {
		case err == nil && req.Type == TypeRemoteRegister:
			result, err = kc.register(req.Args)
		case err == nil:
			result, err = kc.s.opts.Handler.Serve(kc.ctx, req.Type, req.Args)
		default:
			err = codedError{code: protocol.CodeInvalid, err: err}
		}
		req = protocol.HostRequest{}
		kc.reply(r.ID, result, err)
	}()
}

// reply queues the one host_reply for request id. A result whose reply would be over the
// line limit is replaced by an error reply with code too_large.
func (kc *kernelConn) reply(id string, result any, err error) {
	rep := protocol.HostReply{ID: id, Status: protocol.StatusOK}
	if err == nil {
		raw, merr := json.Marshal(result)
		if merr != nil {
			err = codedError{code: protocol.CodeInternal, err: fmt.Errorf("encode result: %w", merr)}
		} else {
			rep.Result = raw
		}
	}
	if err != nil {
		rep.Status = protocol.StatusError
		rep.Result = nil
		rep.Error = replyError(err)
	}
	werr := kc.writeFrame(kc.ctx, rep)
	if errors.Is(werr, ErrFrameTooLarge) {
		rep = protocol.HostReply{ID: id, Status: protocol.StatusError, Error: replyError(codedError{code: protocol.CodeTooLarge, err: werr})}
		werr = kc.writeFrame(kc.ctx, rep)
	}
	if werr != nil {
		kc.s.log.Debug("host reply not delivered", "id", id, "err", werr)
	}
}

func (kc *kernelConn) onRefusal(r gate.Refusal) {
	if !kc.ready.Load() {
		kc.early("host request", []byte(r.ID))
		return
	}
	if f := kc.s.opts.OnGateDecision; f != nil {
		f(string(r.Code))
	}
	rep := protocol.HostReply{
		ID:     r.ID,
		Status: r.Status,
		Error:  &protocol.ReplyError{Code: r.Code, Message: r.Message},
	}
	if r.Status == protocol.StatusDuplicate {
		kc.s.log.Warn("kernel reused a host request id", "id", r.ID)
	}
	if err := kc.writeFrame(kc.ctx, rep); err != nil {
		kc.s.log.Debug("refusal not delivered", "id", r.ID, "err", err)
	}
}

// onEvent routes one non-request frame. It runs on the reader goroutine: nothing here may
// block on the caller.
func (kc *kernelConn) onEvent(f gate.Frame) {
	if !kc.ready.Load() && f.Event != protocol.EventHello && f.Event != protocol.EventLog {
		kc.early(f.Event+" frame", f.Line)
		return
	}
	switch f.Event {
	case protocol.EventJobOutput:
		kc.onJobOutput(f)
		return
	case protocol.EventJobStart:
		kc.onJobStart(f)
		return
	case protocol.EventJobEnd:
		kc.onJobEnd(f)
		return
	case protocol.EventStream:
		kc.onStream(f)
		return
	}
	ev, err := protocol.DecodeEvent(f.Line)
	if err != nil {
		kc.s.log.Warn("undecodable kernel event dropped", "event", f.Event, "id", f.ID, "err", err)
		return
	}
	switch e := ev.(type) {
	case protocol.Hello:
		if kc.ready.Load() {
			kc.s.log.Warn("second hello ignored")
			return
		}
		if err := kc.checkHello(e); err != nil {
			kc.fail(err)
			go func() { _ = kc.k.Kill(context.Background()) }()
			return
		}
		kc.hello = e
		kc.ready.Store(true)
		kc.helloCh <- e
	case protocol.Display:
		if c := lookup(kc, &kc.cells, e.ID, false); c != nil {
			c.display(e.Data)
		}
	case protocol.Done:
		if c := lookup(kc, &kc.cells, e.ID, true); c != nil {
			c.finish(&e, nil)
		} else if r := lookup(kc, &kc.calls, e.ID, true); r != nil {
			r.finish(&e, nil)
		}
	case protocol.Log:
		kc.s.log.Log(context.Background(), logLevel(e.Level), "kernel: "+e.Message)
	}
}

// onStream routes a stream frame to its cell (or call), decoded in one pass when it is in
// the stub's own layout (protocol.StreamDecoder): the hot path of a cell's output.
func (kc *kernelConn) onStream(f gate.Frame) {
	st, err := kc.streams.Decode(f.Line, f.ID)
	if err != nil {
		kc.s.log.Warn("undecodable kernel event dropped", "event", f.Event, "id", f.ID, "err", err)
		return
	}
	if c := lookup(kc, &kc.cells, f.ID, false); c != nil {
		streamTo(c.sink, st.Name, st.Text, st.Quoted)
	} else if r := lookup(kc, &kc.calls, f.ID, false); r != nil {
		r.stream(string(st.Text))
	} else if len(st.Text) > 0 {
		text := string(st.Text[:min(len(st.Text), 512)])
		if len(st.Text) > 512 {
			text += "…"
		}
		kc.s.log.Info("kernel output", "stream", st.Name, "text", text)
	}
}

// track puts v in *m, one of kc's maps of work in flight, as id while the generation
// runs; once it has ended, it returns why instead.
func track[T any](kc *kernelConn, m *map[string]T, id string, v T) error {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	if kc.err != nil {
		return kc.err
	}
	(*m)[id] = v
	return nil
}

// lookup returns the entry id of *m, one of kc's maps of work in flight, taking it out
// when take is set: a later frame of that id then finds nothing.
func lookup[T any](kc *kernelConn, m *map[string]T, id string, take bool) T {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	v := (*m)[id]
	if take {
		delete(*m, id)
	}
	return v
}

func logLevel(l string) slog.Level {
	switch l {
	case protocol.LevelDebug:
		return slog.LevelDebug
	case protocol.LevelWarning:
		return slog.LevelWarn
	case protocol.LevelError:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// codedError gives an error a protocol code.
type codedError struct {
	code protocol.Code
	err  error
}

func (e codedError) Error() string { return e.err.Error() }
func (e codedError) Unwrap() error { return e.err }
func (e codedError) Code() string  { return string(e.code) }

// maxReplyMessage bounds the human message of an error reply.
const maxReplyMessage = 1024

// replyError turns a handler's error into the reply's error object: the code from the
// first error in the chain that has one (a Code() string method), else "internal"; a path
// refusal's reason and version (a Refusal() (reason, version string) method); the message
// cut to maxReplyMessage bytes on a character boundary.
func replyError(err error) *protocol.ReplyError {
	msg := err.Error()
	if len(msg) > maxReplyMessage {
		cut := maxReplyMessage - 3
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "..."
	}
	re := &protocol.ReplyError{Code: protocol.CodeInternal, Message: msg}
	var coder interface{ Code() string }
	if errors.As(err, &coder) {
		if c := protocol.Code(coder.Code()); c.Valid() {
			re.Code = c
		}
	}
	var refusal interface {
		Refusal() (reason, version string)
	}
	if errors.As(err, &refusal) {
		re.Reason, re.Version = refusal.Refusal()
	}
	return re
}
