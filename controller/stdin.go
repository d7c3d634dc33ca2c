package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/kennel-dev/kennel/protocol"
)

// ErrFrameTooLarge: a frame the controller would send is over the protocol's line limit
// (protocol.MaxLine, newline included), which the kernel drops unread. Nothing was sent:
// a cell fails with it before it starts; an oversized host reply goes out as an error reply
// with code too_large instead. Errors wrap it with the frame's size and the limit.
var ErrFrameTooLarge = errdefs.ErrOutOfRange.WithMessage("frame over the protocol's line limit")

// ErrStdinStalled: the kernel did not read its stdin while a frame waited for room in the
// controller's queue to it, until the caller's context ended. The frame was not queued.
var ErrStdinStalled = errdefs.ErrUnavailable.WithMessage("kernel is not reading its stdin")

// maxQueuedStdin bounds the bytes of frames queued for a kernel's stdin and not yet
// written: two frames at the line limit. A frame that finds the queue full waits for room
// (bounded by its caller's context); one frame is always let in when the queue is empty.
const maxQueuedStdin = 2 * protocol.MaxLine

// stdinWriter writes whole frames to a kernel's stdin, in the order they were queued, on
// a goroutine of its own: no caller ever blocks in a write to a kernel that does not read
// (the control path — interrupts, kills, a caller's deadline — stays free). Writes end
// when one fails or the writer is stopped; every frame queued after that is refused.
type stdinWriter struct {
	w      io.Writer
	onFail func(error) // told once when a write fails (not when stopped)

	mu     sync.Mutex
	queue  [][]byte
	queued int           // bytes in queue and in the write in progress
	err    error         // why writing ended; nil while it goes on
	wake   chan struct{} // cap 1: the queue has a frame or the writer was stopped
	room   chan struct{} // closed (and replaced) whenever queued shrinks
}

func newStdinWriter(w io.Writer, onFail func(error)) *stdinWriter {
	sw := &stdinWriter{w: w, onFail: onFail, wake: make(chan struct{}, 1), room: make(chan struct{})}
	go sw.run()
	return sw
}

// send queues line (one whole frame with its newline, which send now owns). It returns
// once the line is queued, not written; it waits only while the queue is full, until ctx
// ends (ErrStdinStalled, with ctx's cause). After the writer ended it returns why.
func (sw *stdinWriter) send(ctx context.Context, line []byte) error {
	for {
		sw.mu.Lock()
		if sw.err != nil {
			err := sw.err
			sw.mu.Unlock()
			return err
		}
		if sw.queued == 0 || sw.queued+len(line) <= maxQueuedStdin {
			sw.queue = append(sw.queue, line)
			sw.queued += len(line)
			sw.mu.Unlock()
			select {
			case sw.wake <- struct{}{}:
			default:
			}
			return nil
		}
		room := sw.room
		sw.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return fmt.Errorf("%w: %d bytes waiting: %w", ErrStdinStalled, sw.pending(), context.Cause(ctx))
		}
	}
}

func (sw *stdinWriter) pending() int {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.queued
}

// stop ends writing with err: frames still queued are dropped, later sends return err.
// A write in progress is not interrupted here; closing the kernel's stdin (its kill)
// does that.
func (sw *stdinWriter) stop(err error) {
	sw.mu.Lock()
	if sw.err == nil {
		sw.err = err
		sw.queue = nil
		sw.freed(sw.queued)
	}
	sw.mu.Unlock()
	select {
	case sw.wake <- struct{}{}:
	default:
	}
}

// freed takes n bytes off queued and wakes the senders waiting for room. sw.mu is held.
func (sw *stdinWriter) freed(n int) {
	sw.queued -= n
	close(sw.room)
	sw.room = make(chan struct{})
}

func (sw *stdinWriter) run() {
	for range sw.wake {
		for {
			sw.mu.Lock()
			if sw.err != nil {
				sw.mu.Unlock()
				return
			}
			if len(sw.queue) == 0 {
				sw.mu.Unlock()
				break
			}
			line := sw.queue[0]
			sw.queue[0] = nil
			sw.queue = sw.queue[1:]
			sw.mu.Unlock()

			_, err := sw.w.Write(line)

			sw.mu.Lock()
			if sw.err != nil { // stopped while writing: queued was reset
				sw.mu.Unlock()
				return
			}
			sw.freed(len(line))
			if err != nil {
				sw.err = fmt.Errorf("write to the kernel's stdin: %w", errors.Join(ErrKernelExited, err))
				sw.queue = nil
				sw.freed(sw.queued)
				err = sw.err
				sw.mu.Unlock()
				sw.onFail(err)
				return
			}
			sw.mu.Unlock()
		}
	}
}
