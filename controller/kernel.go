package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/kennel-dev/kennel/controller/gate"
	"github.com/kennel-dev/kennel/protocol"
	"github.com/kennel-dev/kennel/transports"
)

// kernelConn is one kernel generation: the transport's Kernel, the gate reading its
// frames, and the work in flight on it.
type kernelConn struct {
	s      *Session
	k      transports.Kernel
	hello  protocol.Hello
	stderr *headTail

	ctx    context.Context // ends when the kernel's reader ends; host requests run under it
	cancel context.CancelCauseFunc

	wmu  sync.Mutex // serialises whole frames on stdin
	wbuf []byte

	mu    sync.Mutex
	cells map[string]*cellRun
	jobs  kernelJobs // shell jobs; runs guarded by mu
	err   error      // set once when the generation ends: why
	done  chan struct{}

	helloCh chan protocol.Hello
}

// startKernel starts a kernel generation and waits for its hello. s.mu is held.
func (s *Session) startKernel(ctx context.Context) (*kernelConn, error) {
	stderr := newHeadTail(8 << 10)
	sctx, cancel := context.WithTimeout(ctx, s.opts.StartTimeout)
	defer cancel()
	k, err := s.opts.Transport.Start(sctx, transports.Spec{
		SessionID: s.id,
		Dir:       s.opts.SandboxDir,
		Env:       s.opts.Env,
		Stderr:    stderr,
	})
	if err != nil {
		return nil, fmt.Errorf("start kernel: %w", err)
	}
	kctx, kcancel := context.WithCancelCause(context.Background())
	kc := &kernelConn{
		s: s, k: k, stderr: stderr,
		ctx: kctx, cancel: kcancel,
		cells:   make(map[string]*cellRun),
		jobs:    kernelJobs{runs: make(map[string]*jobRun)},
		done:    make(chan struct{}),
		helloCh: make(chan protocol.Hello, 1),
	}
	go kc.read()

	select {
	case h := <-kc.helloCh:
		kc.hello = h
	case <-kc.done:
		err := kc.endErr()
		_ = kc.kill(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("start kernel: no hello: %w%s", err, stderr.suffix())
	case <-sctx.Done():
		kc.fail(fmt.Errorf("start kernel: %w", context.Cause(sctx)))
		_ = kc.kill(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("start kernel: no hello within %v: %w%s", s.opts.StartTimeout, context.Cause(sctx), stderr.suffix())
	}
	if err := kc.hello.CheckVersion(); err != nil {
		_ = kc.kill(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("start kernel: %w: %w", ErrStale, err)
	}
	if s.opts.Bundle != "" && kc.hello.Bundle != s.opts.Bundle {
		_ = kc.kill(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("start kernel: %w: it runs stub bundle %.12s, this controller has %.12s", ErrStale, kc.hello.Bundle, s.opts.Bundle)
	}
	s.log.Debug("kernel started", "transport", k.Info().Transport, "pid", kc.hello.PID, "python", kc.hello.Python)
	return kc, nil
}

// read runs the gate over the kernel's stdout until it ends, then ends the generation.
func (kc *kernelConn) read() {
	g := gate.New(gate.Config{
		Serves:       kc.serves,
		OnRequest:    kc.onRequest,
		OnRefusal:    kc.onRefusal,
		OnEvent:      kc.onEvent,
		OnDiagnostic: func(msg string) { kc.s.log.Warn("gate: " + msg) },
	})
	err := g.Run(kc.ctx, kc.k.Stdout())
	var fault *gate.ProtocolFault
	if errors.As(err, &fault) {
		// Replace the kernel loudly: fail what is in flight with the fault, kill it; the
		// next cell starts a fresh kernel.
		kc.s.log.Error("kernel broke the protocol; replacing it", "fault", fault.Error(), "pid", kc.hello.PID)
		kc.fail(fmt.Errorf("%w: %w", ErrKernelExited, fault))
		go func() { _ = kc.kill(context.Background()) }()
	} else if err != nil {
		kc.fail(kc.withOOM(fmt.Errorf("%w: reading frames: %w", ErrKernelExited, err)))
	} else {
		kc.fail(kc.withOOM(ErrKernelExited))
	}
	// Reap the process; report how it ended.
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

// ErrOOM: the sandbox's memory limit ended the kernel.
var ErrOOM = errors.New("kernel killed by the memory limit (OOM)")

// oomWait bounds how long a kernel whose stdout ended is waited for, to tell whether the
// memory limit ended it, before the work in flight fails.
const oomWait = 2 * time.Second

// withOOM returns err, joined with ErrOOM when the kernel (whose stdout has ended) was
// ended by the sandbox's memory limit, so a cell in flight fails with a typed OOM error
// rather than a generic exit. It waits for the kernel's exit at most oomWait.
func (kc *kernelConn) withOOM(err error) error {
	ch := make(chan transports.Exit, 1)
	go func() {
		exit, _ := kc.k.Wait()
		ch <- exit
	}()
	t := time.NewTimer(oomWait)
	defer t.Stop()
	select {
	case exit := <-ch:
		if exit.OOM {
			return fmt.Errorf("%w: %w", err, ErrOOM)
		}
	case <-t.C:
	}
	return err
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
	runs := kc.jobs.runs
	kc.jobs.runs = map[string]*jobRun{}
	close(kc.done)
	kc.mu.Unlock()
	kc.cancel(err)
	for _, c := range cells {
		c.finish(nil, err)
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

// kill ends the kernel: closes stdin (the stub's shutdown), then the transport's staged
// kill; it returns once the kernel's end is confirmed or ctx ends.
func (kc *kernelConn) kill(ctx context.Context) error {
	kc.fail(ErrKernelExited)
	err := kc.k.Kill(ctx)
	if err != nil {
		return fmt.Errorf("kill kernel: %w", err)
	}
	return nil
}

func (kc *kernelConn) serves(typ string) bool {
	h := kc.s.opts.Handler
	return h != nil && h.Serves(typ)
}

// onRequest runs an accepted host request's handler on its own goroutine; its result or
// error is the request's one reply.
func (kc *kernelConn) onRequest(r gate.Request) {
	if f := kc.s.opts.OnGateDecision; f != nil {
		f("accepted")
	}
	line := append([]byte(nil), r.Line...) // r.Line is the gate's buffer, valid only during this call
	go func() {
		req, err := protocol.DecodeHostRequest(line)
		var result any
		if err == nil {
			result, err = kc.s.opts.Handler.Serve(kc.ctx, req.Type, req.Args)
		} else {
			err = codedError{code: protocol.CodeInvalid, err: err}
		}
		kc.reply(r.ID, result, err)
	}()
}

// reply writes the one host_reply for request id.
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
	if werr := kc.writeFrame(rep); werr != nil {
		kc.s.log.Debug("host reply not delivered", "id", id, "err", werr)
	}
}

func (kc *kernelConn) onRefusal(r gate.Refusal) {
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
	if err := kc.writeFrame(rep); err != nil {
		kc.s.log.Debug("refusal not delivered", "id", r.ID, "err", err)
	}
}

// onEvent routes one non-request frame. It runs on the reader goroutine: nothing here may
// block on the caller.
func (kc *kernelConn) onEvent(f gate.Frame) {
	switch f.Event {
	case protocol.EventJobStart, protocol.EventJobOutput, protocol.EventJobEnd:
		kc.onJobFrame(f)
		return
	}
	ev, err := protocol.DecodeEvent(f.Line)
	if err != nil {
		kc.s.log.Warn("undecodable kernel event dropped", "event", f.Event, "id", f.ID, "err", err)
		return
	}
	switch e := ev.(type) {
	case protocol.Hello:
		select {
		case kc.helloCh <- e:
		default:
			kc.s.log.Warn("second hello ignored")
		}
	case protocol.Stream:
		if c := kc.cell(e.ID); c != nil {
			c.stream(e.Name, e.Text)
		} else if e.Text != "" {
			kc.s.log.Info("kernel output", "stream", e.Name, "text", truncateForLog(e.Text))
		}
	case protocol.Display:
		if c := kc.cell(e.ID); c != nil {
			c.display(e.Data)
		}
	case protocol.Done:
		kc.mu.Lock()
		c := kc.cells[e.ID]
		delete(kc.cells, e.ID)
		kc.mu.Unlock()
		if c != nil {
			c.finish(&e, nil)
		}
	case protocol.Log:
		kc.s.log.Log(context.Background(), logLevel(e.Level), "kernel: "+e.Message)
	}
}

func (kc *kernelConn) cell(id string) *cellRun {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	return kc.cells[id]
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

func truncateForLog(s string) string {
	if len(s) > 512 {
		return s[:512] + "…"
	}
	return s
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
