package controller

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/kennel-dev/kennel/output"
	"github.com/kennel-dev/kennel/protocol"
)

// TypeRemoteRegister is the host request a kernel sends to offer a @remote function
// (kennel.remote). The controller serves it itself, whatever Options.Handler serves.
const TypeRemoteRegister = "remote.register"

// DefaultBlockingBudget is the blocking budget of a session whose Options.BlockingBudget
// is zero.
const DefaultBlockingBudget = 60 * time.Second

// maxFunctions bounds the @remote functions one kernel may register; past it a
// registration is refused (code invalid).
const maxFunctions = 1024

// maxSchema bounds the JSON schema of one @remote function's arguments.
const maxSchema = 1 << 20

// Function is one @remote function a kernel registered (kennel.remote).
type Function struct {
	// Name is what a call names it by (Session.Call); unique in the kernel: a later
	// registration of the same name replaces the earlier one.
	Name string `json:"name"`
	// Module and QualName are the function's __module__ and __qualname__.
	Module   string `json:"module"`
	QualName string `json:"qualname"`
	// Doc is its docstring ("" for none).
	Doc string `json:"doc"`
	// Async: an async def function, run on the kernel's event loop.
	Async bool `json:"async"`
	// Schema is the JSON schema of its keyword arguments (an object schema), from its
	// type hints.
	Schema json.RawMessage `json:"schema"`
}

// RemoteCallCode is the class of a RemoteCallError.
type RemoteCallCode string

// The codes of a RemoteCallError.
const (
	// CallNotRunning: no kernel runs (none started yet, or the last one ended), so no
	// @remote function is there to call.
	CallNotRunning RemoteCallCode = "not_running"
	// CallUnreachable: the kernel stopped, was replaced or went out of reach before it
	// answered (told at once, never at the end of the budget), or is being reattached.
	CallUnreachable RemoteCallCode = "unreachable"
	// CallUnknown: the kernel has no @remote function of that name.
	CallUnknown RemoteCallCode = "unknown"
	// CallTimeout: the function did not answer within the blocking budget. A synchronous
	// one goes on on its own thread (whose cost it is); the kernel serves on.
	CallTimeout RemoteCallCode = "timeout"
	// CallFailed: the function raised (wrong arguments: a TypeError), or its value
	// cannot be carried (Reason "unencodable": NaN, Infinity, no JSON form; "too_large":
	// over 16 MiB).
	CallFailed RemoteCallCode = "failed"
)

// RemoteCallError is how a @remote call ended without a value. Callers decide on Code
// (or with errors.Is against errdefs classes: not_running and unreachable are
// ErrUnavailable, unknown ErrNotFound, timeout context.DeadlineExceeded (errdefs.IsDeadlineExceeded), failed
// ErrUnknown).
type RemoteCallError struct {
	Code RemoteCallCode
	// Function is the name the call gave.
	Function string
	// Reason is the kernel's reason for a failed call: "failed" (it raised),
	// "unencodable", "too_large"; "" for the other codes.
	Reason string
	// Exception is what the function raised (or the stub's error for its value), for a
	// failed call; nil otherwise.
	Exception *protocol.CellError
	// Err is the cause, when there is one (the kernel's end, say).
	Err error
}

// Error says which function, how the call ended, and why.
func (e *RemoteCallError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "remote call %s: %s", e.Function, e.Code)
	if e.Reason != "" && e.Reason != string(e.Code) {
		fmt.Fprintf(&b, " (%s)", e.Reason)
	}
	if x := e.Exception; x != nil {
		fmt.Fprintf(&b, ": %s: %s", x.EName, x.EValue)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

// Unwrap returns the cause and the code's errdefs class.
func (e *RemoteCallError) Unwrap() []error {
	var class error = errdefs.ErrUnknown
	switch e.Code {
	case CallNotRunning, CallUnreachable:
		class = errdefs.ErrUnavailable
	case CallUnknown:
		class = errdefs.ErrNotFound
	case CallTimeout:
		class = context.DeadlineExceeded
	}
	if e.Err != nil {
		return []error{class, e.Err}
	}
	return []error{class}
}

// CallOptions configure one Session.Call.
type CallOptions struct {
	// Budget bounds the call below the session's blocking budget; zero (or more than the
	// session's) means the session's.
	Budget time.Duration
}

// CallResult is the value of a @remote call that answered.
type CallResult struct {
	// ID is the call's id in the session ("r7").
	ID string
	// Function is the name the call gave.
	Function string
	// Value is the function's value as JSON, whole, when its text is within the session's
	// truncation limits; nil when it is over them (Truncated then holds its window).
	Value json.RawMessage
	// Truncated, when the value's JSON text was over the session's truncation limits, is
	// that text bounded by them (kept window, dropped counts, notice); nil otherwise.
	Truncated *output.Result
	// Output is what the function wrote to sys.stdout and sys.stderr, bounded by the
	// session's truncation.
	Output output.Result
}

// callRun is a @remote call in flight on one kernel generation. It ends as a cell does
// (cellRun.finish), its output going to out instead of a sink.
type callRun struct {
	cellRun
	function string

	mu  sync.Mutex
	out *output.Bounder
}

func (c *callRun) stream(text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.out != nil {
		_, _ = c.out.Write([]byte(text))
	}
}

// Functions lists the @remote functions the session's current kernel registered, by
// name; none when no kernel runs. It starts no kernel.
func (s *Session) Functions() []Function {
	kc := s.cur.Load()
	if kc == nil || kc.ended() {
		return nil
	}
	kc.mu.Lock()
	out := slices.AppendSeq(make([]Function, 0, len(kc.functions)), maps.Values(kc.functions))
	kc.mu.Unlock()
	slices.SortFunc(out, func(a, b Function) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Call calls @remote function name of the session's kernel with args (a JSON object of
// keyword arguments; nil: none) and waits for its answer at most the blocking budget
// (Options.BlockingBudget, below it CallOptions.Budget). The call goes to the kernel on a
// lane of its own: it waits for no cell, and no cell waits for it. It starts no kernel.
//
// An answer without a value is a *RemoteCallError (see its codes): not_running with no
// kernel, unknown for a name the kernel did not register, unreachable at once when the
// kernel ends or goes out of reach before it answers, timeout past the budget, failed
// when the function raised or its value cannot be carried. When ctx ends first, Call
// returns ctx's cause. Any other error means the call could not be sent.
func (s *Session) Call(ctx context.Context, name string, args json.RawMessage, opts CallOptions) (*CallResult, error) {
	budget := cmp.Or(max(s.opts.BlockingBudget, 0), DefaultBlockingBudget)
	if opts.Budget > 0 {
		budget = min(budget, opts.Budget)
	}
	kc := s.cur.Load()
	if kc == nil || kc.ended() {
		if s.Reattaching() {
			return nil, &RemoteCallError{Code: CallUnreachable, Function: name, Err: errors.New("the session's kernel is being reattached")}
		}
		return nil, &RemoteCallError{Code: CallNotRunning, Function: name}
	}
	kc.mu.Lock()
	fn, ok := kc.functions[name]
	kc.mu.Unlock()
	if !ok {
		return nil, &RemoteCallError{Code: CallUnknown, Function: name}
	}
	out, err := output.NewBounder(s.opts.Truncation, output.BounderOptions{})
	if err != nil {
		return nil, fmt.Errorf("call %s: %w", name, err)
	}
	id := s.nextID("r")
	c := &callRun{cellRun: cellRun{done: make(chan struct{})}, function: name, out: out}
	if err := track(kc, &kc.calls, id, c); err != nil {
		return nil, &RemoteCallError{Code: CallUnreachable, Function: name, Err: err}
	}

	t := time.NewTimer(budget)
	defer t.Stop()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // the budget bounds the send too
		select {
		case <-t.C:
			c.finish(nil, &RemoteCallError{Code: CallTimeout, Function: name, Err: fmt.Errorf("no answer within %v", budget)})
		case <-wctx.Done():
		case <-c.done:
		}
	}()
	if err := kc.writeFrame(wctx, protocol.Call{ID: id, Module: fn.Module, Function: fn.Name, Args: args}); err != nil {
		lookup(kc, &kc.calls, id, true)
		select {
		case <-c.done: // the budget passed, or the kernel ended, while it was queued
			return nil, c.err
		default:
		}
		if errors.Is(err, ErrFrameTooLarge) || ctx.Err() != nil {
			return nil, fmt.Errorf("call %s: %w", name, err)
		}
		return nil, &RemoteCallError{Code: CallUnreachable, Function: name, Err: err}
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		lookup(kc, &kc.calls, id, true)
		return nil, fmt.Errorf("call %s: %w", name, context.Cause(ctx))
	}
	lookup(kc, &kc.calls, id, true)
	if c.err != nil {
		var rce *RemoteCallError
		if errors.As(c.err, &rce) {
			return nil, c.err
		}
		return nil, &RemoteCallError{Code: CallUnreachable, Function: name, Err: c.err}
	}
	c.mu.Lock()
	res := &CallResult{ID: id, Function: name, Output: c.out.Result()}
	c.out = nil
	c.mu.Unlock()
	d := c.res
	if d.Status != protocol.DoneOK {
		code := CallFailed
		if d.Reason == string(CallUnknown) {
			code = CallUnknown
		}
		reason := cmp.Or(d.Reason, string(CallFailed))
		return nil, &RemoteCallError{Code: code, Function: name, Reason: reason, Exception: d.Error}
	}
	value := []byte("null")
	if d.Result != nil {
		value = []byte(*d.Result)
	}
	if !json.Valid(value) {
		return nil, &RemoteCallError{Code: CallFailed, Function: name, Reason: "unencodable", Err: errors.New("the kernel's value is not JSON")}
	}
	bounded, err := output.Bound(value, s.opts.Truncation)
	if err != nil {
		return nil, fmt.Errorf("call %s: %w", name, err)
	}
	if bounded.DroppedBytes > 0 {
		res.Truncated = &bounded
	} else {
		res.Value = json.RawMessage(value)
	}
	return res, nil
}

// reloadWait bounds how long a reattached kernel is asked for its @remote functions.
const reloadWait = 30 * time.Second

// reloadFunctions asks a kernel this controller reattached to (an earlier controller
// was told its registrations) for its @remote functions: call "registrations" of module
// "kennel". A kernel that cannot tell (an older stub) keeps none.
func (kc *kernelConn) reloadFunctions() {
	id := kc.s.nextID("r")
	c := &callRun{cellRun: cellRun{done: make(chan struct{})}, function: "registrations"}
	if track(kc, &kc.calls, id, c) != nil {
		return
	}
	defer lookup(kc, &kc.calls, id, true)
	ctx, cancel := context.WithTimeout(kc.ctx, reloadWait)
	defer cancel()
	if err := kc.writeFrame(ctx, protocol.Call{ID: id, Module: "kennel", Function: "registrations"}); err != nil {
		return
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		return
	}
	if c.err != nil || c.res.Status != protocol.DoneOK || c.res.Result == nil {
		return
	}
	var regs []json.RawMessage
	if err := json.Unmarshal([]byte(*c.res.Result), &regs); err != nil {
		kc.s.log.Warn("the reattached kernel's @remote functions are unreadable", "err", err)
		return
	}
	for _, reg := range regs {
		if _, err := kc.register(reg); err != nil {
			kc.s.log.Warn("a @remote function of the reattached kernel refused", "err", err)
		}
	}
}

// functionName is what a @remote function may be named: a Python identifier.
var functionName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,254}$`)

// register serves a kernel's remote.register request: the function is kept for the
// generation's life (a later one of the same name replaces it).
func (kc *kernelConn) register(args json.RawMessage) (any, error) {
	var f Function
	if err := json.Unmarshal(args, &f); err != nil {
		return nil, codedError{code: protocol.CodeInvalid, err: fmt.Errorf("remote.register: %w", err)}
	}
	switch {
	case !functionName.MatchString(f.Name):
		return nil, codedError{code: protocol.CodeInvalid, err: fmt.Errorf("remote.register: name %q is not a Python identifier", f.Name)}
	case f.Module == "":
		return nil, codedError{code: protocol.CodeInvalid, err: errors.New("remote.register: no module")}
	case len(f.Schema) > maxSchema:
		return nil, codedError{code: protocol.CodeTooLarge, err: fmt.Errorf("remote.register: a schema of %d bytes is over %d", len(f.Schema), maxSchema)}
	}
	if sc := bytes.TrimSpace(f.Schema); len(sc) == 0 || sc[0] != '{' {
		return nil, codedError{code: protocol.CodeInvalid, err: errors.New("remote.register: the schema is not an object")}
	}
	f.QualName = cmp.Or(f.QualName, f.Name)
	var compact bytes.Buffer
	if err := json.Compact(&compact, f.Schema); err != nil {
		return nil, codedError{code: protocol.CodeInvalid, err: fmt.Errorf("remote.register: schema: %w", err)}
	}
	f.Schema = compact.Bytes()
	kc.mu.Lock()
	defer kc.mu.Unlock()
	if _, ok := kc.functions[f.Name]; !ok && len(kc.functions) >= maxFunctions {
		return nil, codedError{code: protocol.CodeInvalid, err: fmt.Errorf("remote.register: a kernel registers at most %d functions", maxFunctions)}
	}
	kc.functions[f.Name] = f
	return map[string]string{"name": f.Name}, nil
}
