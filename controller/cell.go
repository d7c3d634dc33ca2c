package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/kennel-dev/kennel/protocol"
)

// Sink receives a cell's output as the kernel writes it, on the session's reader
// goroutine: its methods must not block for long (they hold back every frame behind them).
type Sink interface {
	// Stream receives text the cell wrote to stdout or stderr (name is "stdout"/"stderr").
	Stream(name, text string)
	// Display receives a rich value: a JSON object from MIME type to value.
	Display(data json.RawMessage)
}

// TextSink is a Sink that takes a stream's text as bytes, and in its JSON form when the
// kernel's frame had it, so a sink that keeps bytes or writes JSON copies it once and
// escapes nothing. A cell's output goes to StreamText instead of Stream when its sink
// has it.
type TextSink interface {
	Sink
	// StreamText receives text the cell wrote to stdout or stderr (name is
	// "stdout"/"stderr"). quoted, when not nil, is text as a JSON string literal, quotes
	// included, printable ASCII, that decodes to exactly text. Both are valid only
	// during the call.
	StreamText(name string, text, quoted []byte)
}

// WriterSink writes streams to Stdout and Stderr (nil drops them) and displays as a
// line of JSON to Stdout.
type WriterSink struct {
	Stdout, Stderr io.Writer
}

// Stream writes text to the writer of its stream.
func (w WriterSink) Stream(name, text string) {
	if out := w.of(name); out != nil {
		_, _ = io.WriteString(out, text)
	}
}

// StreamText writes text to the writer of its stream, as Stream does, without a copy.
func (w WriterSink) StreamText(name string, text, _ []byte) {
	if out := w.of(name); out != nil {
		_, _ = out.Write(text)
	}
}

// of returns the writer of stream name (nil: drop it).
func (w WriterSink) of(name string) io.Writer {
	if name == protocol.StreamStderr {
		return w.Stderr
	}
	return w.Stdout
}

// Display writes the value's text/plain form if it has one, else its JSON.
func (w WriterSink) Display(data json.RawMessage) {
	if w.Stdout == nil {
		return
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) == nil {
		var text string
		if raw, ok := m["text/plain"]; ok && json.Unmarshal(raw, &text) == nil {
			_, _ = io.WriteString(w.Stdout, text+"\n")
			return
		}
	}
	_, _ = w.Stdout.Write(append(data, '\n'))
}

// CellResult is how a cell ended.
type CellResult struct {
	// ID is the cell's id within the session.
	ID string
	// Status is "ok", "error" or "interrupted".
	Status string
	// Result is the repr of the cell's final expression, or nil.
	Result *string
	// Error is the exception of a cell with status "error", else nil.
	Error *protocol.CellError
	// Reason says why the kernel itself interrupted the cell: "memory" (protocol.
	// ReasonMemory) when its memory passed the session's cap, "" otherwise. Note then
	// names what the namespace holds and the cap, for people.
	Reason string
	Note   string
	// Upgrade, when set, says that a stale kernel was replaced just before this cell ran
	// (Session.Upgrade) and what of its namespace was carried over.
	Upgrade *UpgradeNotice
	// Lost, when set, says that the session's kernel had been lost (a restart found it
	// gone) and that this cell started a fresh one: the namespace before it is gone.
	Lost string
}

// cellRun is a cell in flight.
type cellRun struct {
	sink Sink
	once sync.Once
	done chan struct{}
	res  *protocol.Done
	err  error
	// ended, when set, runs once right after the cell ended, on the goroutine that ended
	// it (the kernel's reader, or whoever failed the kernel): it must not block.
	ended func()
}

// streamTo passes stream text (and its JSON form, or nil) to sink: to its StreamText
// when it has one; a nil sink drops it.
func streamTo(sink Sink, name string, text, quoted []byte) {
	switch sink := sink.(type) {
	case nil:
	case TextSink:
		sink.StreamText(name, text, quoted)
	default:
		sink.Stream(name, string(text))
	}
}

func (c *cellRun) display(data json.RawMessage) {
	if c.sink != nil {
		c.sink.Display(data)
	}
}

// finish ends the cell once: with the kernel's done frame, or with err.
func (c *cellRun) finish(d *protocol.Done, err error) {
	c.once.Do(func() {
		c.res, c.err = d, err
		close(c.done)
		if c.ended != nil {
			c.ended()
		}
	})
}

// Execute runs code as one cell and returns how it ended. Output streams to sink (nil
// drops it) while the cell runs. A Python exception is a result with Status "error", not an
// error; an error means the cell could not run to its end (the kernel died, broke the
// protocol — a *gate.ProtocolFault is then in the chain —, or the session closed) or could
// not be sent: a cell whose frame is over the line limit is ErrFrameTooLarge, with nothing
// sent and the kernel untouched.
//
// When ctx ends, the cell is interrupted (KeyboardInterrupt in the kernel); if it has not
// ended after Options.InterruptGrace, its kernel is killed and Execute returns ctx's error.
// Execute never waits on a kernel that does not read its stdin past that: the kill closes
// the kernel's stdin and climbs its transport's ladder.
func (s *Session) Execute(ctx context.Context, code string, sink Sink) (*CellResult, error) {
	kc, err := s.kernel(ctx, false)
	if err != nil {
		return nil, err
	}
	id := s.nextID("c")
	c := &cellRun{sink: sink, done: make(chan struct{})}
	if err := track(kc, &kc.cells, id, c); err != nil {
		return nil, err
	}
	if err := kc.writeFrame(ctx, protocol.Execute{ID: id, Code: code}); err != nil {
		lookup(kc, &kc.cells, id, true)
		if ctx.Err() != nil {
			kc.stalled(id, err)
		}
		return nil, fmt.Errorf("cell %s: %w", id, err)
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		if err := kc.interrupt(id); err != nil {
			kc.s.log.Debug("interrupt not delivered", "cell", id, "err", err)
		}
		t := time.NewTimer(s.opts.InterruptGrace)
		defer t.Stop()
		select {
		case <-c.done:
		case <-t.C:
			s.log.Warn("cell ignored its interrupt; killing its kernel", "cell", id, "grace", s.opts.InterruptGrace)
			cause := fmt.Errorf("cell %s did not stop within %v of its interrupt: %w", id, s.opts.InterruptGrace, context.Cause(ctx))
			kc.fail(fmt.Errorf("%w: %w", ErrKernelExited, cause))
			_ = kc.kill(context.WithoutCancel(ctx))
			return nil, cause
		}
	}
	if c.err != nil {
		return nil, fmt.Errorf("cell %s: %w", id, c.err)
	}
	return s.cellResult(id, c.res), nil
}

// interrupt queues an interrupt for cell id, waiting for room at most the interrupt grace.
func (kc *kernelConn) interrupt(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), kc.s.opts.InterruptGrace)
	defer cancel()
	return kc.writeFrame(ctx, protocol.Interrupt{ID: id})
}

// stalled ends a kernel that did not read its stdin while the caller of cell id gave up
// waiting to send it: a kernel that does not read cannot be interrupted either, so it is
// killed and the next cell starts a fresh one.
func (kc *kernelConn) stalled(id string, err error) {
	if !errors.Is(err, ErrStdinStalled) {
		return
	}
	kc.s.log.Warn("kernel does not read its stdin; killing it", "cell", id)
	kc.fail(fmt.Errorf("%w: %w", ErrKernelExited, err))
	go func() { _ = kc.k.Kill(context.Background()) }()
}
