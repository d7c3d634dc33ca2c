package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"

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

// syscallConner is a stdin whose descriptor can be written without blocking (a pipe, a
// socket: os.File and net.Conn).
type syscallConner interface {
	SyscallConn() (syscall.RawConn, error)
}

// stdinWriter writes whole frames to a kernel's stdin, in the order they were queued, so
// that no caller ever blocks in a write to a kernel that does not read (the control path —
// interrupts, kills, a caller's deadline — stays free). A frame is written on the caller's
// goroutine when nothing else is queued or being written and the stdin's descriptor takes
// non-blocking writes (a pipe does): what the kernel does not take at once goes to a
// goroutine of the writer's own, as every frame does otherwise. Writes end when
// one fails or the writer is stopped; every frame queued after that is refused.
type stdinWriter struct {
	w      io.Writer
	direct syscall.RawConn // w's descriptor when it takes non-blocking writes, else nil
	onFail func(error)     // told once when a write fails (not when stopped)

	mu     sync.Mutex
	queue  [][]byte
	queued int           // bytes in queue and in the write in progress
	busy   bool          // a write is in progress (the goroutine's or a caller's)
	err    error         // why writing ended; nil while it goes on
	wake   chan struct{} // cap 1: the queue has a frame or the writer was stopped
	room   chan struct{} // closed (and replaced) whenever queued shrinks
}

func newStdinWriter(w io.Writer, onFail func(error)) *stdinWriter {
	sw := &stdinWriter{w: w, onFail: onFail, wake: make(chan struct{}, 1), room: make(chan struct{})}
	if sc, ok := w.(syscallConner); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			sw.direct = rc
		}
	}
	go sw.run()
	return sw
}

// send queues line (one whole frame with its newline, which send now owns). It returns
// once the line is written or queued; it waits only while the queue is full, until ctx
// ends (ErrStdinStalled, with ctx's cause), never in a write. After the writer ended it
// returns why.
func (sw *stdinWriter) send(ctx context.Context, line []byte) error {
	for {
		sw.mu.Lock()
		if sw.err != nil {
			err := sw.err
			sw.mu.Unlock()
			return err
		}
		if sw.direct != nil && !sw.busy && len(sw.queue) == 0 {
			sw.busy = true
			sw.queued += len(line)
			sw.mu.Unlock()
			return sw.writeDirect(line)
		}
		if sw.queued == 0 || sw.queued+len(line) <= maxQueuedStdin {
			sw.queue = append(sw.queue, line)
			sw.queued += len(line)
			sw.mu.Unlock()
			sw.poke()
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

// writeDirect writes what of line the kernel's stdin takes at once, on the caller's
// goroutine, never waiting; the rest is queued first, for the writer goroutine. sw.busy
// is set.
func (sw *stdinWriter) writeDirect(line []byte) error {
	n := 0
	var werr error
	err := sw.direct.Write(func(fd uintptr) bool {
		for n < len(line) {
			m, err := syscall.Write(int(fd), line[n:])
			if m > 0 {
				n += m
			}
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN:
				return true // full: the goroutine writes the rest, waiting as it may
			case err != nil:
				werr = err
				return true
			case m == 0:
				return true
			}
		}
		return true
	})
	if werr == nil {
		werr = err
	}
	sw.mu.Lock()
	sw.busy = false
	if sw.err != nil { // stopped meanwhile: queued was reset
		sw.mu.Unlock()
		return nil
	}
	if werr == nil {
		sw.freed(n)
		if n < len(line) {
			// The rest goes first: nothing was queued behind it while busy was set.
			sw.queue = append([][]byte{line[n:]}, sw.queue...)
		}
		more := len(sw.queue) > 0
		sw.mu.Unlock()
		if more {
			sw.poke()
		}
		return nil
	}
	err = sw.failLocked(werr)
	sw.mu.Unlock()
	sw.onFail(err)
	return err
}

func (sw *stdinWriter) poke() {
	select {
	case sw.wake <- struct{}{}:
	default:
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
	sw.poke()
}

// freed takes n bytes off queued and wakes the senders waiting for room. sw.mu is held.
func (sw *stdinWriter) freed(n int) {
	sw.queued -= n
	close(sw.room)
	sw.room = make(chan struct{})
}

// failLocked ends writing after a failed write and returns the error to report.
// sw.mu is held.
func (sw *stdinWriter) failLocked(err error) error {
	sw.err = fmt.Errorf("write to the kernel's stdin: %w", errors.Join(ErrKernelExited, err))
	sw.queue = nil
	sw.freed(sw.queued)
	return sw.err
}

func (sw *stdinWriter) run() {
	for range sw.wake {
		for {
			sw.mu.Lock()
			if sw.err != nil {
				sw.mu.Unlock()
				return
			}
			if len(sw.queue) == 0 || sw.busy {
				// Nothing to write, or a caller's write is in progress: it pokes the
				// writer when it leaves more behind.
				sw.mu.Unlock()
				break
			}
			line := sw.queue[0]
			sw.queue[0] = nil
			sw.queue = sw.queue[1:]
			sw.busy = true
			sw.mu.Unlock()

			_, err := sw.w.Write(line)

			sw.mu.Lock()
			sw.busy = false
			if sw.err != nil { // stopped while writing: queued was reset
				sw.mu.Unlock()
				return
			}
			sw.freed(len(line))
			if err != nil {
				err = sw.failLocked(err)
				sw.mu.Unlock()
				sw.onFail(err)
				return
			}
			sw.mu.Unlock()
		}
	}
}
