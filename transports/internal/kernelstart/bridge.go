package kernelstart

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/link"
	"github.com/kennel-dev/kennel/transports"
)

// BridgeReady is the line a bridge writes on its stdout once it is connected to its
// kernel's socket; every byte after it is the kernel's.
const BridgeReady = "kennel-bridge/1 connected\n"

// Exit statuses of the bridge program (bridge.py).
const (
	// BridgeGone: no kernel there (no run directory, no socket, or a socket nobody
	// listens on), said before the bridge wrote any byte.
	BridgeGone = 3
	// BridgeOtherNamespace: the kernel was started in another pid namespace than the
	// bridge runs in, so its pids name other processes there (signal).
	BridgeOtherNamespace = 4
)

//go:embed bridge.py
var bridgeSource string

// bridgeFuncs defines the bridge without running it.
var bridgeFuncs = images.PythonProgram(strings.ReplaceAll(bridgeSource, "BRIDGE_READY\\n", strings.TrimSuffix(BridgeReady, "\n")+"\\n"))

// bridgeProgram is the -c program of the bridge's actions (bridge.py): run as
// `python -I -S -c PROGRAM ACTION ARG...` in the kernel's sandbox, with attach RUN,
// signal RUN PID PGID LEADER TERM|KILL, or cleanup RUN.
var bridgeProgram = bridgeFuncs + "import os, sys\n_kennel_bridge([os.fsencode(a) for a in sys.argv[1:]] or [b''])\n"

// DetachedProgram is Program(next) for a detached kernel reached through bridges: the
// start program's parent, once it has forked the kernel (KENNEL_KERNEL_RUN in the block),
// connects to the kernel's socket and relays its own stdin and stdout to it (the
// kernel's first connection, announced by BridgeReady) instead of exiting.
func DetachedProgram(next string) string { return bridgeFuncs + "\n" + Program(next) }

// BridgeArgv is the argv of a bridge action run by python in the sandbox, after prefix
// (a wrapper's argv, `env -i PATH=...`, or nothing).
func BridgeArgv(prefix []string, python, action string, args ...string) []string {
	argv := append(append([]string(nil), prefix...), python, "-I", "-S", "-c", bridgeProgram, action)
	return append(argv, args...)
}

// Runner runs one command in a transport's sandbox (through its wrapper, as an exec in a
// container): argv is the whole command, stderr receives its stderr (nil discards it).
// ctx bounds only the start.
type Runner func(ctx context.Context, argv []string, stderr io.Writer) (Proc, error)

// Proc is one command running in a sandbox: Read reads its stdout, Write writes its
// stdin, and the deadlines apply to them. Close ends both streams, and the command's end
// follows (the transport ends a command that does not end by itself); it is safe to call
// more than once and with a Read or Write in flight.
type Proc interface {
	net.Conn
	// Exit blocks until the command has ended and what it wrote to stderr has been
	// copied, or ctx ends, and returns its exit status (-1 for a signal).
	Exit(ctx context.Context) (int, error)
}

// BridgeError is a bridge (or a detached kernel's start command) that ended without
// connecting: its exit status and the start of what it wrote to stderr. It unwraps to
// link.ErrGone for BridgeGone before any byte on stdout (no kernel there), and to
// transports.ErrUnavailable for 126 and 127 (no such interpreter or wrapper command).
type BridgeError struct {
	// Action is the bridge action ("start", "attach", ...).
	Action string
	// Code is the exit status, -1 for a signal.
	Code int
	// Stderr is the start of the command's stderr (at most 2 KiB).
	Stderr string
	// Wrote reports that something other than BridgeReady came on stdout first.
	Wrote bool
}

// Error reads "bridge ACTION exited CODE: STDERR".
func (e *BridgeError) Error() string {
	return fmt.Sprintf("bridge %s exited %d: %s", e.Action, e.Code, strings.TrimSpace(e.Stderr))
}

// Unwrap is link.ErrGone, transports.ErrUnavailable or nil (see BridgeError).
func (e *BridgeError) Unwrap() error {
	switch {
	case e.Code == BridgeGone && !e.Wrote && e.Action != "start":
		return link.ErrGone
	case e.Code == 126 || e.Code == 127:
		return transports.ErrUnavailable
	}
	return nil
}

// NoKernel reports whether err is a bridge's "no kernel there" (BridgeGone), as opposed
// to a refused attach: only then is the run directory known to hold no live kernel.
func NoKernel(err error) bool {
	var be *BridgeError
	return errors.As(err, &be) && be.Code == BridgeGone && !be.Wrote && be.Action != "start"
}

// OpenBridge runs argv (an attach bridge, or a detached kernel's start command under
// DetachedProgram) and writes preamble to its stdin (the start block, the bundle and the
// token of a start; nil for an attach). It returns the command as the kernel's connection
// once the command wrote BridgeReady, with the preamble written whole. A command that
// ends first is a *BridgeError; ctx ending first is ctx's cause; either way the command is
// closed (and so ends). stderr, when set, gets the command's stderr too.
func OpenBridge(ctx context.Context, run Runner, action string, argv []string, preamble []byte, stderr io.Writer) (net.Conn, error) {
	said := &HeadBuffer{Limit: 2048}
	p, err := run(ctx, argv, teeWriter{said, stderr})
	if err != nil {
		return nil, fmt.Errorf("bridge %s: %w", action, err)
	}
	if err := await(ctx, p, action, BridgeReady, preamble, said); err != nil {
		return nil, err
	}
	return p, nil
}

// await writes preamble to p's stdin and waits until p wrote line on its stdout, with
// the preamble written whole (the bridge reads stdin only once it is connected). A
// command that ends first is a *BridgeError (its stderr the start of said); ctx ending
// first is ctx's cause; either way p is closed (and so ends).
func await(ctx context.Context, p Proc, action, line string, preamble []byte, said *HeadBuffer) error {
	written := make(chan error, 1)
	if len(preamble) > 0 {
		go func() {
			_, err := p.Write(preamble)
			written <- err
		}()
	} else {
		written <- nil
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = p.SetReadDeadline(time.Now())
		close(fired)
	})
	buf := make([]byte, len(line))
	n, rerr := io.ReadFull(p, buf)
	if !stop() {
		<-fired
	}
	if rerr == nil && string(buf) == line {
		_ = p.SetReadDeadline(time.Time{})
		if err := <-written; err != nil {
			p.Close()
			return fmt.Errorf("bridge %s: write its stdin: %w", action, err)
		}
		return nil
	}
	p.Close()
	<-written
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("bridge %s: %w", action, err)
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	code, err := p.Exit(ectx)
	if err != nil {
		return fmt.Errorf("bridge %s: its end: %w", action, err)
	}
	return &BridgeError{Action: action, Code: code, Stderr: said.String(), Wrote: n > 0}
}

// RunBridge runs a bridge action that does not connect (signal, cleanup) and returns
// its exit status and the start of what it wrote to stdout and to stderr (2 KiB each).
func RunBridge(ctx context.Context, run Runner, argv []string) (code int, stdout, stderr string, err error) {
	said := &HeadBuffer{Limit: 2048}
	p, err := run(ctx, argv, said)
	if err != nil {
		return 0, "", "", err
	}
	defer p.Close()
	stop := context.AfterFunc(ctx, func() { p.Close() })
	defer stop()
	out := &HeadBuffer{Limit: 2048}
	_, _ = io.Copy(out, p) // its stdout ends with it
	code, err = p.Exit(ctx)
	return code, out.String(), said.String(), err
}

// teeWriter writes to a and, when set, b, whose errors are ignored: a caller's writer
// that fails never stops the copy of a command's stderr.
type teeWriter struct {
	a io.Writer
	b io.Writer
}

func (w teeWriter) Write(p []byte) (int, error) {
	_, _ = w.a.Write(p)
	if w.b != nil {
		_, _ = w.b.Write(p)
	}
	return len(p), nil
}

// HeadBuffer keeps the first Limit bytes written to it and drops the rest (a Write never
// fails): what a process said first, bounded. Safe for concurrent use.
type HeadBuffer struct {
	Limit int

	mu sync.Mutex
	b  []byte
}

// Write keeps what fits of p and reports all of it written.
func (h *HeadBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := h.Limit - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// String is what was kept.
func (h *HeadBuffer) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(h.b)
}
