package link

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/containerd/errdefs"
)

// Options configure a Client.
type Options struct {
	// Kernel and Token name the kernel and prove the right to attach. Required.
	Kernel, Token string
	// Grace is how long the kernel may stay unattached; sent in every attach.
	Grace time.Duration
	// Dial makes each connection. Required.
	Dial Dialer
	// Backoff paces reattaching (the zero value: the protocol's).
	Backoff Backoff
	// AckDelay bounds how long an applied kernel frame waits for its acknowledgement
	// (default 100 ms).
	AckDelay time.Duration
	// HandshakeTimeout bounds one dial and handshake (default 10 s).
	HandshakeTimeout time.Duration
	// OnFrame, when set, sees each kernel frame (without its newline) once, in order, as
	// it is received, before Frames delivers it. It runs on the goroutine reading the
	// connection (often the one in Frames().Read) and must not block or keep the slice.
	OnFrame func(frame []byte)
	// Logger receives drops and reattaches (default: discard).
	Logger *slog.Logger
	// Heartbeat is how often the controller writes when it has nothing else to write (a
	// bare ack), sent in every attach: a kernel that hears nothing for three of them takes
	// the connection for dead (a partitioned host), drops it and starts its grace. Zero
	// is DefaultHeartbeat; negative sends none and asks the kernel for no such check.
	Heartbeat time.Duration
	// Applied is the highest kernel seq an earlier controller applied (from its record,
	// transports.Record.Applied): the first attach acknowledges it, and frames up to it
	// are never delivered again. Zero (nothing known) has the kernel resend every frame
	// it holds unacknowledged.
	Applied uint64
}

// Client is the controller's side of one detached kernel's link. The kernel's frames come
// out of Frames as protocol 1 lines, each exactly once and in order (frames the kernel's
// outbox dropped excepted; Hello counts them); lines written to Send reach the kernel
// the same way. A dropped connection is reattached in the background; Frames and Send
// simply wait meanwhile. The link ends when the kernel is proven gone (Err wraps
// ErrGone), when reattaching runs out of tries (ErrUnreachable), or at Close
// (ErrDetached); the kernel itself is never touched.
//
// A kernel frame counts as applied, and is acknowledged, once Frames has delivered it
// whole: the kernel keeps what a reader has not taken yet, so a controller that ends
// meanwhile loses none of it (Applied is what a later one resumes after).
type Client struct {
	opts     Options
	instance string    // Attach.Controller: this Client's own, random
	dropped  time.Time // DroppedAt, under mu

	mu      sync.Mutex
	cond    *sync.Cond // room in out, the end
	out     *Outbox
	in      Inbox // kernel frames received (a replay is dropped)
	hello   Hello
	attachN int
	ackSent uint64
	ackFire bool
	ackArm  *time.Timer
	wire    wire        // the connection, nil between connections
	w       *connWriter // conn's writing, nil between connections
	rd      *connReader // conn's reading, nil between connections
	partial []byte
	err     error // the end, once set
	kick    chan struct{}

	// Kernel frames received, waiting for Frames (deliver.go): whole lines, oldest first
	// (the first read up to qOff), qBytes of them. applied is the seq of the last one
	// Frames delivered whole. rcond: a frame queued, a connection's read free, the end;
	// room: room in the queue, the end.
	q       []queuedFrame
	qOff    int
	qBytes  int
	rcond   *sync.Cond
	room    *sync.Cond
	applied uint64

	stop  context.CancelFunc
	ctx   context.Context
	ended chan struct{}
}

// connWriter is the writing side of one connection, under Client.mu. Whoever makes
// bytes due (a Send, the ack timer) writes them itself when nothing else is writing, as
// far as the socket takes them without waiting (wire.TryWrite); what it does not take
// is tail, for the connection's writer goroutine, the one write that may wait on the
// socket (it also sends the resend after each hello). One write at a time (busy), so
// bytes go out in the order they were collected.
type connWriter struct {
	wire  wire
	sent  uint64 // the outbox has been collected up to this seq
	busy  bool   // a write is under way, outside the lock
	wrote bool   // something was collected since the last heartbeat tick
	beat  bool   // a heartbeat is due: a bare ack even with nothing new to acknowledge
	tail  []byte // collected bytes not written yet
	buf   []byte // reused for collecting, while no tail refers to it
}

// Open dials the kernel, makes the first handshake (with the reattach backoff) and
// returns the running link. ctx bounds only this first attach.
func Open(ctx context.Context, opts Options) (*Client, error) {
	if opts.Kernel == "" || opts.Token == "" || opts.Dial == nil {
		return nil, fmt.Errorf("link: kernel, token and dialer are required: %w", errdefs.ErrInvalidArgument)
	}
	if opts.AckDelay <= 0 {
		opts.AckDelay = 100 * time.Millisecond
	}
	opts.Heartbeat = cmp.Or(opts.Heartbeat, DefaultHeartbeat)
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = 10 * time.Second
	}
	opts.Logger = cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	opts.Backoff = opts.Backoff.resolved()
	c := &Client{opts: opts, instance: rand.Text(), out: NewOutbox(ControllerMaxFrames, ControllerMaxBytes), kick: make(chan struct{}, 1), ended: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	c.rcond = sync.NewCond(&c.mu)
	c.room = sync.NewCond(&c.mu)
	c.in = Inbox{last: opts.Applied}
	c.applied = opts.Applied
	c.ctx, c.stop = context.WithCancel(context.Background())
	wr, err := c.connect(ctx, true)
	if err != nil {
		c.stop()
		return nil, err
	}
	go c.run(wr)
	return c, nil
}

// Hello is the kernel's latest hello.
func (c *Client) Hello() Hello {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hello
}

// Applied is the highest kernel seq applied so far (delivered whole by Frames): what a
// record keeps so that a later controller resumes after it (Options.Applied).
func (c *Client) Applied() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.applied
}

// Attaches counts the handshakes made (1 after Open).
func (c *Client) Attaches() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.attachN
}

// Frames is the kernel's frames, one protocol 1 line each; a Read returns as many
// whole or partial lines as fit. It ends with the link's error when the link does:
// after the frames already received, except at Close (ErrDetached), after which it
// delivers nothing more (the kernel keeps what was not delivered for a later
// controller). One reader at a time.
func (c *Client) Frames() io.Reader { return frameReader{c} }

// Send takes protocol 1 lines for the kernel. A Write may hold part of a line (the rest
// comes in the next); it waits while the outbox is full and fails once the link ended.
// Close detaches, as Client.Close does.
func (c *Client) Send() io.WriteCloser { return sender{c} }

// Done is closed when the link has ended; Err then says why.
func (c *Client) Done() <-chan struct{} { return c.ended }

// Err is why the link ended (nil while it runs).
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close detaches: the connection is closed and no reattach follows. The kernel runs on
// (its grace begins). It waits for the link's goroutines.
func (c *Client) Close() error {
	c.finish(ErrDetached)
	<-c.ended
	return nil
}

// Drop closes the current connection, as a network fault would; the link reattaches
// and nothing is lost or repeated. It is the fault injection of tests and drills.
func (c *Client) Drop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rd != nil {
		c.rd.failLocked(errDropped)
	}
	if c.wire != nil {
		_ = c.wire.Close()
	}
}

// errDropped is why a connection Drop closed ended.
var errDropped = fmt.Errorf("link: connection dropped: %w", net.ErrClosed)

type sender struct{ c *Client }

func (s sender) Write(p []byte) (int, error) { return s.c.write(p) }
func (s sender) Close() error                { return s.c.Close() }

func (c *Client) write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(c.partial)+len(p) > MaxLine {
				return n - len(p), fmt.Errorf("link: a frame over %d bytes: %w", MaxLine, ErrNotEnvelope)
			}
			c.partial = append(c.partial, p...)
			break
		}
		frame := append(c.partial, p[:i]...)
		c.partial = nil
		p = p[i+1:]
		if c.err == nil && !c.out.Room(len(frame)) {
			c.sendNowLocked() // what was pushed so far goes out while this waits
			if c.rd != nil {
				c.rd.wakeBackground() // the kernel's acks make room: they must be read
			}
			for c.err == nil && !c.out.Room(len(frame)) {
				c.cond.Wait()
			}
		}
		if c.err != nil {
			return n - len(p) - i - 1, c.err
		}
		c.out.Push(frame, "")
	}
	c.sendNowLocked()
	return n, nil
}

// sendNowLocked writes what is due on the current connection from the calling
// goroutine, when no other write is under way, as far as the socket takes it without
// waiting; the writer goroutine carries the rest. It releases c.mu while it writes.
func (c *Client) sendNowLocked() {
	w := c.w
	if w == nil || c.err != nil {
		return
	}
	if w.busy || w.tail != nil {
		c.poke()
		return
	}
	data := c.collectLocked(w)
	if len(data) == 0 {
		return
	}
	w.busy = true
	c.mu.Unlock()
	n := w.wire.TryWrite(data)
	c.mu.Lock()
	w.busy = false
	if n < len(data) {
		w.tail = data[n:]
		c.poke()
	} else if c.dueLocked(w) {
		c.poke() // pushed by another goroutine while this one wrote
	}
}

// dueLocked reports whether w has bytes to write: a tail, outbox frames past w.sent or
// an ack the timer asked for.
func (c *Client) dueLocked(w *connWriter) bool {
	return w.tail != nil || c.out.Next()-1 > w.sent || (c.ackFire && c.applied > c.ackSent) || w.beat
}

// collectLocked returns the bytes due on w, moving its cursors past them: its tail, or
// else every outbox frame past w.sent as envelopes carrying the applied ack, or else a
// bare ack when the timer asked for one. Nil when nothing is due.
func (c *Client) collectLocked(w *connWriter) []byte {
	if w.tail != nil {
		data := w.tail
		w.tail = nil
		return data
	}
	pending := c.out.After(w.sent)
	ack := c.applied
	bare := len(pending) == 0 && (c.ackFire && ack > c.ackSent || w.beat)
	if len(pending) == 0 && !bare {
		return nil
	}
	c.ackSent = ack
	c.ackFire = false
	w.beat = false
	w.wrote = true
	buf := w.buf[:0]
	for _, e := range pending {
		buf = Envelope{Seq: e.Seq, Ack: ack, Frame: e.Frame}.Append(buf)
		w.sent = e.Seq
	}
	if bare {
		buf = Envelope{Ack: ack}.Append(buf)
	}
	w.buf = buf
	return buf
}

// poke wakes the writer.
func (c *Client) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// finish ends the link with err (the first cause wins).
func (c *Client) finish(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
		if c.wire != nil {
			_ = c.wire.Close()
		}
		c.stop()
		if c.rd != nil {
			c.rd.failLocked(err)
		}
		if errors.Is(err, ErrDetached) {
			// Detached: what the reader did not take stays with the kernel, unacknowledged,
			// for a later controller.
			c.q, c.qOff, c.qBytes = nil, 0, 0
		}
		c.cond.Broadcast()
		c.rcond.Broadcast()
		c.room.Broadcast()
	}
	c.mu.Unlock()
}

// run serves connections until the link ends.
func (c *Client) run(wr wire) {
	defer close(c.ended)
	for {
		err := c.serve(wr)
		if c.ctx.Err() != nil {
			return
		}
		c.mu.Lock()
		c.dropped = time.Now()
		c.mu.Unlock()
		c.opts.Logger.Info("kernel link dropped; reattaching", "kernel", c.opts.Kernel, "err", err)
		if wr, err = c.connect(c.ctx, false); err != nil {
			c.finish(err)
			return
		}
		c.mu.Lock()
		c.dropped = time.Time{}
		c.mu.Unlock()
	}
}

// DroppedAt is when the link lost its connection and began reattaching: zero while a
// connection is up, and kept once reattaching ran out of tries (ErrUnreachable). A
// kernel out of reach since then was last heard from no later: with no connection its
// grace runs out at most a grace (and its three heartbeats) after it.
func (c *Client) DroppedAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}

// connect dials and handshakes, with backoff; first makes the first try at once.
func (c *Client) connect(ctx context.Context, first bool) (wire, error) {
	b := c.opts.Backoff
	began := time.Now()
	var last error
	for i := 0; i < b.Tries; i++ {
		if i > 0 && time.Since(began) >= b.Within {
			return nil, fmt.Errorf("%w: %d tries in %v: %w", ErrUnreachable, i, time.Since(began).Round(time.Millisecond), last)
		}
		if i > 0 || !first {
			select {
			case <-time.After(b.delay(i)):
			case <-ctx.Done():
				return nil, c.ended2(ctx)
			}
		}
		wr, err := c.handshake(ctx)
		if err == nil {
			return wr, nil
		}
		if errors.Is(err, ErrGone) {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, c.ended2(ctx)
		}
		last = err
		c.opts.Logger.Debug("kernel attach failed", "kernel", c.opts.Kernel, "try", i+1, "err", err)
	}
	return nil, fmt.Errorf("%w: %d tries: %w", ErrUnreachable, b.Tries, last)
}

// ended2 is the error of a connect that ctx cut short: the link's own end, or ctx's.
func (c *Client) ended2(ctx context.Context) error {
	if err := c.Err(); err != nil {
		return err
	}
	return context.Cause(ctx)
}

// handshake makes one connection and its attach, and returns its wire.
func (c *Client) handshake(ctx context.Context) (wire, error) {
	hctx, cancel := context.WithTimeout(ctx, c.opts.HandshakeTimeout)
	defer cancel()
	conn, err := c.opts.Dial(hctx)
	if err != nil {
		return nil, err
	}
	deadline, _ := hctx.Deadline()
	_ = conn.SetDeadline(deadline)
	c.mu.Lock()
	ack := c.applied // frames received past it come again, and are dropped as replays
	c.mu.Unlock()
	line := Attach{Kernel: c.opts.Kernel, Token: c.opts.Token, Ack: ack, Grace: GraceSeconds(c.opts.Grace), Controller: c.instance, Heartbeat: max(0, c.opts.Heartbeat.Seconds())}.MarshalLine()
	if _, err := conn.Write(line); err != nil {
		conn.Close()
		return nil, fmt.Errorf("write attach: %w", err)
	}
	reply, err := readLine(bufio.NewReaderSize(oneByte{conn}, 1), maxHandshakeLine)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("read hello: %w", err)
	}
	h, err := DecodeReply(reply)
	if err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		conn.Close()
		return nil, c.err
	}
	c.out.Ack(h.Ack)
	c.out.Resume(h.Ack)
	c.hello = h
	c.attachN++
	wr := newWire(conn)
	c.wire = wr
	c.w = &connWriter{wire: wr, sent: h.Ack}
	c.rd = c.newConnReader(wr)
	c.ackSent = 0 // the attach carried the applied ack; envelopes carry it again
	c.cond.Broadcast()
	c.rcond.Broadcast() // a connection for a waiting Frames reader to read
	return wr, nil
}

// oneByte reads the hello a byte at a time so nothing after its newline is consumed by
// a buffer the envelope reader does not share.
type oneByte struct{ r io.Reader }

func (o oneByte) Read(p []byte) (int, error) { return o.r.Read(p[:min(len(p), 1)]) }

// serve runs one connection until it fails or the link ends; it returns why it ended.
func (c *Client) serve(wr wire) error {
	c.mu.Lock()
	w, rd := c.w, c.rd
	c.mu.Unlock()
	wdone := make(chan error, 1)
	cdone := make(chan struct{})
	go func() {
		err := c.writeLoop(w, cdone)
		c.mu.Lock()
		rd.failLocked(err) // a failed write ends the connection
		c.mu.Unlock()
		wdone <- err
	}()
	bdone := make(chan struct{})
	go func() {
		c.readBackground(rd)
		close(bdone)
	}()
	<-rd.done
	wr.Close()
	close(cdone)
	werr := <-wdone
	<-bdone
	c.mu.Lock()
	// A Frames reader still reading this connection meets its end at once; the next
	// connection is read only after it let go, so frames are applied in order.
	for rd.holder != holderNone {
		c.rcond.Wait()
	}
	if c.w == w {
		c.w = nil
	}
	if c.rd == rd {
		c.rd = nil
	}
	if c.wire == wr {
		c.wire = nil
	}
	rerr := rd.err
	c.mu.Unlock()
	if rerr == nil {
		rerr = werr
	}
	return rerr
}

// writeLoop is w's writer goroutine: it writes what is due on w that no other
// goroutine wrote at once (tails, the resend after the hello, everything on a wire whose
// TryWrite takes nothing), waiting on the socket as long as it takes, until the
// connection fails.
func (c *Client) writeLoop(w *connWriter, cdone <-chan struct{}) error {
	var beats <-chan time.Time
	if c.opts.Heartbeat > 0 {
		tick := time.NewTicker(c.opts.Heartbeat)
		defer tick.Stop()
		beats = tick.C
	}
	for {
		c.mu.Lock()
		if c.err != nil {
			c.mu.Unlock()
			return net.ErrClosed
		}
		var data []byte
		if !w.busy {
			data = c.collectLocked(w)
		}
		if len(data) > 0 {
			w.busy = true
		}
		c.mu.Unlock()
		if len(data) > 0 {
			_, err := w.wire.Write(data)
			c.mu.Lock()
			w.busy = false
			c.mu.Unlock()
			if err != nil {
				return err
			}
			continue
		}
		select {
		case <-c.kick:
		case <-beats:
			c.mu.Lock()
			if !w.wrote {
				w.beat = true // nothing went out for a whole tick
			}
			w.wrote = false
			c.mu.Unlock()
		case <-cdone:
			return net.ErrClosed
		case <-c.ctx.Done():
			return c.ctx.Err()
		}
	}
}

// readLine reads one line of at most limit bytes (newline included) from br; a longer
// line is ErrNotEnvelope.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > limit {
			return nil, fmt.Errorf("%w: a line over %d bytes", ErrNotEnvelope, limit)
		}
		line = append(line, chunk...)
		if err == nil {
			return line, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if err == io.EOF && len(line) > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}
