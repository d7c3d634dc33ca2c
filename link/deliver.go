package link

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// Kernel frames in: how a connection is read and its frames reach Frames.
//
// The connection is read by the goroutine that waits for a frame: a Frames reader with
// nothing queued reads it itself, so the kernel's frame wakes the goroutine that takes
// it, as a pipe read would, with no hand-off between goroutines. While no Frames reader
// reads, the connection's background goroutine does (the kernel's acks, the end of the
// connection, frames for the queue), so the link keeps its state whatever its reader
// does: it takes over when a connection starts, when a Send waits for room, and when no
// Frames reader has come back within handoffDelay; a Frames reader takes the read back
// by cutting the background's read short (wire.Interrupt). A reader that reads in a
// loop thus costs no goroutine but its own, and no timer per frame. One goroutine reads
// a connection at a time (holder), and the next connection is read only once nobody
// reads the one before, so frames are applied in order.

// Bounds of the queue of kernel frames received but not yet read from Frames: past
// them the link stops reading the connection until the reader catches up (one frame,
// however large, is always taken). The kernel holds them all unacknowledged meanwhile.
const (
	queueFrames = 1024
	queueBytes  = 1 << 20
)

// handoffDelay is how long a connection may go unread after a Frames reader stopped
// reading it before the background goroutine reads it.
const handoffDelay = 50 * time.Millisecond

// queuedFrame is one kernel frame waiting for Frames: its line, newline included, and
// the pooled envelope line it aliases (nil for none), given back once it is delivered.
type queuedFrame struct {
	seq  uint64
	line []byte
	buf  []byte
}

// Envelope lines of at least poolMin bytes are taken from linePool and given back once
// their frame is delivered: a cell's output passes tens of MB through them, in frames of
// about 60 KiB. Capacities are rounded up to poolStep, and none over poolMax is kept.
const (
	poolMin  = 16 << 10
	poolStep = 64 << 10
	poolMax  = 256 << 10
)

var linePool sync.Pool // of *[]byte, each of capacity a multiple of poolStep

// newLine returns a copy of b, from the pool when it is large enough to be pooled.
func newLine(b []byte) []byte {
	if len(b) < poolMin || len(b) > poolMax {
		return append([]byte(nil), b...)
	}
	if p, ok := linePool.Get().(*[]byte); ok && cap(*p) >= len(b) {
		return append((*p)[:0], b...)
	}
	return append(make([]byte, 0, (len(b)+poolStep-1)/poolStep*poolStep), b...)
}

// freeLine gives b, a line newLine made and nothing refers to any longer, back to the pool.
func freeLine(b []byte) {
	if c := cap(b); c >= poolMin && c <= poolMax && c%poolStep == 0 {
		b = b[:0]
		linePool.Put(&b)
	}
}

// Who reads a connection (connReader.holder).
const (
	holderNone = iota
	holderBackground
	holderFrames
)

// connReader is the reading side of one connection: under Client.mu, but for br and
// partial, which belong to the goroutine that holds the read.
type connReader struct {
	wire    wire
	br      *bufio.Reader
	partial []byte // a line read in part (a read cut short resumes it)
	holder  int    // who reads now
	want    int    // Frames readers waiting for the background to give up the read
	err     error  // why the connection's reading ended; done is closed then
	done    chan struct{}
	wake    chan struct{} // (one slot) the background goroutine may read
	idle    *time.Timer   // armed when a Frames reader stops reading: see idleCheck
	armed   bool
}

func (c *Client) newConnReader(wr wire) *connReader {
	rd := &connReader{wire: wr, br: bufio.NewReaderSize(wr, 64<<10), done: make(chan struct{}), wake: make(chan struct{}, 1)}
	rd.wake <- struct{}{} // read from the start, unless a Frames reader does
	rd.idle = time.AfterFunc(time.Hour, func() { c.idleCheck(rd) })
	rd.idle.Stop()
	return rd
}

// idleCheck runs handoffDelay after a Frames reader stopped reading rd: the background
// reads if no Frames reader does now.
func (c *Client) idleCheck(rd *connReader) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rd.armed = false
	if rd.err == nil && rd.holder == holderNone {
		rd.wakeBackground()
	}
}

func (rd *connReader) wakeBackground() {
	select {
	case rd.wake <- struct{}{}:
	default:
	}
}

// failLocked ends rd's reading with err (the first cause wins) and closes its
// connection, so the writer and the background goroutine end too.
func (rd *connReader) failLocked(err error) {
	if rd.err == nil {
		rd.err = err
		close(rd.done)
		rd.idle.Stop()
		_ = rd.wire.Close()
	}
}

// readLine reads one line (newline included) of at most MaxLine bytes; a longer one is
// ErrNotEnvelope. An error leaves what was read of the line for the next call.
func (rd *connReader) readLine() ([]byte, error) {
	for {
		chunk, err := rd.br.ReadSlice('\n')
		if len(rd.partial)+len(chunk) > MaxLine {
			rd.partial = nil
			return nil, fmt.Errorf("%w: a line over %d bytes", ErrNotEnvelope, MaxLine)
		}
		if err == nil && rd.partial == nil {
			return newLine(chunk), nil // the buffer is reused: a copy
		}
		rd.partial = append(rd.partial, chunk...)
		if err == nil {
			line := rd.partial
			rd.partial = nil
			return line, nil
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == io.EOF && len(rd.partial) > 0 {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
}

type frameReader struct{ c *Client }

func (r frameReader) Read(p []byte) (int, error) { return r.c.read(p) }

// read delivers queued frames into p; with none queued it reads the connection itself
// (or waits for whoever does) until one is.
func (c *Client) read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.q) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		rd := c.rd
		switch {
		case rd == nil || rd.err != nil || rd.holder == holderFrames:
			c.rcond.Wait() // a connection to read, a frame, the end
		case rd.holder == holderBackground:
			rd.want++
			rd.wire.Interrupt() // the background gives up its read
			c.rcond.Wait()
			rd.want--
		default:
			rd.holder = holderFrames
			rd.wire.ClearInterrupt()
			c.mu.Unlock()
			err := c.readEnvelopes(rd, false)
			c.mu.Lock()
			rd.holder = holderNone
			if err != nil && !errors.Is(err, errInterrupted) {
				rd.failLocked(err)
			} else if !rd.armed {
				// Armed once per handoffDelay at most, not per frame: arming a timer
				// may wake the runtime's poller.
				rd.armed = true
				rd.idle.Reset(handoffDelay)
			}
			c.rcond.Broadcast() // another Frames reader may read now
		}
	}
	n := 0
	delivered := false
	for n < len(p) && len(c.q) > 0 {
		f := &c.q[0]
		k := copy(p[n:], f.line[c.qOff:])
		n += k
		c.qOff += k
		if c.qOff < len(f.line) {
			break
		}
		c.applied = f.seq
		c.qBytes -= len(f.line)
		freeLine(f.buf)
		c.q[0] = queuedFrame{}
		c.q = c.q[1:]
		c.qOff = 0
		delivered = true
	}
	if delivered {
		if len(c.q) == 0 {
			c.q = c.q[:0:0] // let the backing array go once drained
		}
		c.room.Broadcast()
		c.armAckLocked()
	}
	return n, nil
}

// readBackground is rd's background goroutine: it reads the connection whenever woken
// and no Frames reader does, until the connection's reading ends.
func (c *Client) readBackground(rd *connReader) {
	for {
		select {
		case <-rd.wake:
		case <-rd.done:
			return
		}
		c.mu.Lock()
		if rd.err != nil {
			c.mu.Unlock()
			return
		}
		if rd.holder != holderNone || rd.want > 0 {
			c.mu.Unlock()
			continue // a Frames reader reads; it wakes this goroutine when it stops
		}
		rd.holder = holderBackground
		rd.wire.ClearInterrupt()
		c.mu.Unlock()
		err := c.readEnvelopes(rd, true)
		c.mu.Lock()
		rd.holder = holderNone
		switch {
		case errors.Is(err, errInterrupted):
			if rd.want == 0 {
				rd.wakeBackground() // a deadline left behind: read on
			}
		case err != nil:
			rd.failLocked(err)
		}
		c.rcond.Broadcast() // a Frames reader waiting for the read
		c.mu.Unlock()
	}
}

// readEnvelopes applies rd's envelopes (acks, frames for the queue) until reading fails,
// or, with background false, until it has queued a frame.
func (c *Client) readEnvelopes(rd *connReader, background bool) error {
	for {
		line, err := rd.readLine()
		if err != nil {
			return err
		}
		e, err := Decode(line)
		if err != nil {
			c.opts.Logger.Warn("kernel link fault", "kernel", c.opts.Kernel, "err", err)
			return err
		}
		c.mu.Lock()
		c.out.Ack(e.Ack)
		c.cond.Broadcast()
		apply := !e.Bare() && c.in.Accept(e.Seq)
		c.mu.Unlock()
		if !apply {
			freeLine(line)
			continue
		}
		if c.opts.OnFrame != nil {
			c.opts.OnFrame(e.Frame)
		}
		fl := frameLine(line, e.Frame)
		buf := line // fl aliases it, or is a copy and line is free
		if len(fl) == 0 || len(line) <= len(fl) || &fl[0] != &line[len(line)-len(fl)-1] {
			freeLine(line)
			buf = nil
		}
		if err := c.enqueue(rd, e.Seq, fl, buf); err != nil {
			return err
		}
		if !background {
			return nil
		}
	}
}

// frameLine returns the protocol 1 line of frame, which aliases the envelope line it was
// decoded from: in place when the line ends with the envelope's "}\n" right after the
// frame (its '}' becomes the frame's newline), else a copy.
func frameLine(line, frame []byte) []byte {
	end := len(line) - 2
	start := end - len(frame)
	if start >= 0 && len(frame) > 0 && line[end] == '}' && line[end+1] == '\n' && &line[start] == &frame[0] {
		line[end] = '\n'
		return line[start : end+1]
	}
	return append(append(make([]byte, 0, len(frame)+1), frame...), '\n')
}

// enqueue queues a frame received on rd for Frames, waiting for room. Once rd's
// connection has ended it queues the frame without waiting (it was received: it is
// never dropped) and returns rd's error; once the link has ended it fails.
func (c *Client) enqueue(rd *connReader, seq uint64, line, buf []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.err == nil && rd.err == nil && len(c.q) > 0 && (len(c.q) >= queueFrames || c.qBytes+len(line) > queueBytes) {
		c.room.Wait()
	}
	if c.err != nil {
		return c.err
	}
	c.q = append(c.q, queuedFrame{seq: seq, line: line, buf: buf})
	c.qBytes += len(line)
	c.rcond.Broadcast()
	return rd.err
}

// armAckLocked makes sure an ack of what Frames delivered goes out within AckDelay.
func (c *Client) armAckLocked() {
	if c.ackArm != nil {
		return
	}
	c.ackArm = time.AfterFunc(c.opts.AckDelay, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.ackArm = nil
		c.ackFire = true
		c.sendNowLocked()
	})
}
