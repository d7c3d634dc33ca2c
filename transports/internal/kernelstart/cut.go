package kernelstart

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// CutReader is a kernel's output stream (a FIFO, an exec's stdout) that can be cut: once
// Cut, a read that fails ends with io.EOF, so the stream's reader gets a clean end when
// nobody read it to its end in time. One goroutine reads at a time; Cut and Drain may be
// called from any goroutine.
type CutReader struct {
	r     io.Reader
	close func()
	isCut atomic.Bool
	once  sync.Once
	eof   chan struct{} // closed once a read returned an error: drained
}

// NewCutReader returns the CutReader of r; close ends r (a blocked Read returns) and is
// called at most once, by Cut.
func NewCutReader(r io.Reader, close func()) *CutReader {
	return &CutReader{r: r, close: close, eof: make(chan struct{})}
}

// Read reads from the stream (see CutReader).
func (c *CutReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil {
		c.once.Do(func() { close(c.eof) })
		if c.isCut.Load() {
			return n, io.EOF
		}
	}
	return n, err
}

// Cut ends the stream unless it was read to its end.
func (c *CutReader) Cut() {
	select {
	case <-c.eof:
		return
	default:
	}
	if c.isCut.CompareAndSwap(false, true) {
		c.close()
	}
}

// Drain waits up to d for the stream to be read to its end, then cuts it.
func (c *CutReader) Drain(d time.Duration) {
	select {
	case <-c.eof:
	case <-time.After(d):
	}
	c.Cut()
}

// ErrStdinClosed is a write to a kernel's Stdin after its Close.
var ErrStdinClosed = errors.New("kernel stdin closed")

// Stdin is a kernel's standard input: writes go to w until Close, which runs end once and
// makes later writes fail with ErrStdinClosed (a later Close returns nil). Safe for
// concurrent use.
type Stdin struct {
	w   io.Writer
	end func() error

	mu     sync.Mutex
	closed bool
}

// NewStdin returns the Stdin writing to w whose Close runs end.
func NewStdin(w io.Writer, end func() error) *Stdin { return &Stdin{w: w, end: end} }

// Write writes p to the kernel's stdin, or fails with ErrStdinClosed after Close.
func (s *Stdin) Write(p []byte) (int, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return 0, ErrStdinClosed
	}
	return s.w.Write(p)
}

// Close ends the kernel's stdin (end's error) the first time it is called.
func (s *Stdin) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.end()
}
