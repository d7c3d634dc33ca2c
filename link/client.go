package link

import (
	"bufio"
	"bytes"
	"context"
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
	// OnFrame, when set, sees each kernel frame (without its newline) as it is applied,
	// in order, before Frames delivers it. It must not block or keep the slice.
	OnFrame func(frame []byte)
	// Logger receives drops and reattaches (default: discard).
	Logger *slog.Logger
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
type Client struct {
	opts Options

	mu      sync.Mutex
	cond    *sync.Cond // room in out, the end
	out     *Outbox
	in      Inbox
	hello   Hello
	attachN int
	ackSent uint64
	ackFire bool
	ackArm  *time.Timer
	conn    net.Conn
	partial []byte
	err     error // the end, once set
	kick    chan struct{}

	framesR *io.PipeReader
	framesW *io.PipeWriter
	stop    context.CancelFunc
	ctx     context.Context
	ended   chan struct{}
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
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	opts.Backoff = opts.Backoff.resolved()
	c := &Client{opts: opts, out: NewOutbox(ControllerMaxFrames, ControllerMaxBytes), kick: make(chan struct{}, 1), ended: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	c.in = Inbox{last: opts.Applied}
	c.framesR, c.framesW = io.Pipe()
	c.ctx, c.stop = context.WithCancel(context.Background())
	conn, err := c.connect(ctx, true)
	if err != nil {
		c.stop()
		return nil, err
	}
	go c.run(conn)
	return c, nil
}

// Hello is the kernel's latest hello.
func (c *Client) Hello() Hello {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hello
}

// Applied is the highest kernel seq applied so far: what a record keeps so that a later
// controller resumes after it (Options.Applied).
func (c *Client) Applied() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.in.Last()
}

// Attaches counts the handshakes made (1 after Open).
func (c *Client) Attaches() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.attachN
}

// Frames is the kernel's frames, one protocol 1 line each. It ends (with the link's
// error) when the link does.
func (c *Client) Frames() io.Reader { return c.framesR }

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
	if c.conn != nil {
		_ = c.conn.Close()
	}
}

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
		for c.err == nil && !c.out.Room(len(frame)) {
			c.cond.Wait()
		}
		if c.err != nil {
			return n - len(p) - i - 1, c.err
		}
		c.out.Push(frame, "")
		c.poke()
	}
	return n, nil
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
		if c.conn != nil {
			_ = c.conn.Close()
		}
		c.stop()
		_ = c.framesW.CloseWithError(err)
		c.cond.Broadcast()
	}
	c.mu.Unlock()
}

// run serves connections until the link ends.
func (c *Client) run(conn net.Conn) {
	defer close(c.ended)
	for {
		err := c.serve(conn)
		if c.ctx.Err() != nil {
			return
		}
		c.opts.Logger.Info("kernel link dropped; reattaching", "kernel", c.opts.Kernel, "err", err)
		if conn, err = c.connect(c.ctx, false); err != nil {
			c.finish(err)
			return
		}
	}
}

// connect dials and handshakes, with backoff; first makes the first try at once.
func (c *Client) connect(ctx context.Context, first bool) (net.Conn, error) {
	b := c.opts.Backoff
	var last error
	for i := 0; i < b.Tries; i++ {
		if i > 0 || !first {
			select {
			case <-time.After(b.delay(i)):
			case <-ctx.Done():
				return nil, c.ended2(ctx)
			}
		}
		conn, err := c.handshake(ctx)
		if err == nil {
			return conn, nil
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

// handshake makes one connection and its attach.
func (c *Client) handshake(ctx context.Context) (net.Conn, error) {
	hctx, cancel := context.WithTimeout(ctx, c.opts.HandshakeTimeout)
	defer cancel()
	conn, err := c.opts.Dial(hctx)
	if err != nil {
		return nil, err
	}
	deadline, _ := hctx.Deadline()
	_ = conn.SetDeadline(deadline)
	c.mu.Lock()
	ack := c.in.Last()
	c.mu.Unlock()
	line := Attach{Kernel: c.opts.Kernel, Token: c.opts.Token, Ack: ack, Grace: GraceSeconds(c.opts.Grace)}.MarshalLine()
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
	c.conn = conn
	c.ackSent = 0 // the attach carried in.Last(); envelopes carry it again
	c.cond.Broadcast()
	return conn, nil
}

// oneByte reads the hello a byte at a time so nothing after its newline is consumed by
// a buffer the envelope reader does not share.
type oneByte struct{ r io.Reader }

func (o oneByte) Read(p []byte) (int, error) { return o.r.Read(p[:min(len(p), 1)]) }

// serve runs one connection until it fails or the link ends; it returns why it ended.
func (c *Client) serve(conn net.Conn) error {
	c.mu.Lock()
	sent := c.hello.Ack
	c.mu.Unlock()
	wdone := make(chan error, 1)
	cdone := make(chan struct{})
	go func() {
		err := c.writeLoop(conn, sent, cdone)
		conn.Close() // a failed write ends the read too
		wdone <- err
	}()
	rerr := c.readLoop(conn)
	conn.Close()
	close(cdone)
	werr := <-wdone
	if rerr == nil {
		rerr = werr
	}
	return rerr
}

// readLoop applies the kernel's envelopes until the connection fails.
func (c *Client) readLoop(conn net.Conn) error {
	br := bufio.NewReaderSize(conn, 64<<10)
	for {
		line, err := readLine(br, MaxLine)
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
			continue
		}
		if c.opts.OnFrame != nil {
			c.opts.OnFrame(e.Frame)
		}
		frame := make([]byte, 0, len(e.Frame)+1)
		frame = append(append(frame, e.Frame...), '\n')
		if _, err := c.framesW.Write(frame); err != nil {
			return err
		}
		c.armAck()
	}
}

// armAck makes sure an ack goes out within AckDelay.
func (c *Client) armAck() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ackArm != nil {
		return
	}
	c.ackArm = time.AfterFunc(c.opts.AckDelay, func() {
		c.mu.Lock()
		c.ackArm = nil
		c.ackFire = true
		c.mu.Unlock()
		c.poke()
	})
}

// writeLoop sends the outbox past sent, and acks, until the connection fails.
func (c *Client) writeLoop(conn net.Conn, sent uint64, cdone <-chan struct{}) error {
	bw := bufio.NewWriterSize(conn, 64<<10)
	var buf []byte
	for {
		c.mu.Lock()
		if c.err != nil {
			c.mu.Unlock()
			return net.ErrClosed
		}
		pending := c.out.After(sent)
		ack := c.in.Last()
		bare := len(pending) == 0 && c.ackFire && ack > c.ackSent
		if len(pending) > 0 || bare {
			c.ackSent = ack
			c.ackFire = false
		}
		c.mu.Unlock()
		for _, e := range pending {
			buf = Envelope{Seq: e.Seq, Ack: ack, Frame: e.Frame}.Append(buf[:0])
			if _, err := bw.Write(buf); err != nil {
				return err
			}
			sent = e.Seq
		}
		if bare {
			buf = Envelope{Ack: ack}.Append(buf[:0])
			if _, err := bw.Write(buf); err != nil {
				return err
			}
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		select {
		case <-c.kick:
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
