package kernelstart

import (
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
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.eof:
	case <-t.C:
	}
	c.Cut()
}
