package gate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
)

// Buffer sizes. The buffer starts at initialBuf, grows (at least doubling, and to twice
// the pending line) to hold the longest line within the limit, and shrinks back to
// retainBuf once lines longer than that have stopped coming.
const (
	initialBuf = 64 << 10
	retainBuf  = 4 << 20
	minRead    = 4 << 10
	// shrinkAfter is how many reads in a row must find no long line pending before a
	// buffer grown past retainBuf shrinks back.
	shrinkAfter = 64
)

// ErrReused is returned by a second call of Run.
var ErrReused = errors.New("gate: Run called twice")

// splitter holds Run's read buffer: buf[start:end] is read but not yet decided on, and
// buf[start:scan] is known to hold no newline.
type splitter struct {
	buf              []byte
	start, end, scan int
	base             int64 // stream offset of buf[0]
	skipping         bool  // inside an oversized line already decided on
	skipFrom         int64 // stream offset of that line
	skipHead         []byte
	maxBuf           int
	calm             int // reads in a row with no long line pending
}

// Run reads r to its end and decides on every line, in order, through the Config's
// callbacks. It returns nil at EOF after a final newline; a *ProtocolFault at the first
// line the host cannot answer (including a last line cut off by EOF); the read error
// (wrapped) when r fails; or context.Cause(ctx) when ctx ends. ctx is checked between
// reads: to stop a Run blocked in Read, close r.
//
// Memory: a line is held whole only while it is within the limit. Once a line reaches
// the limit without a newline the gate decides on it from its head and reads the rest
// through its buffer without keeping it, so the gate holds about MaxLine bytes at most,
// whatever a line's length.
func (g *Gate) Run(ctx context.Context, r io.Reader) error {
	if g.ran {
		return ErrReused
	}
	g.ran = true
	s := &splitter{
		buf:    make([]byte, min(initialBuf, g.lim.maxLine+minRead)),
		maxBuf: g.lim.maxLine + minRead,
	}
	empty := 0 // consecutive empty reads
	for {
		if err := g.decide(s); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		s.makeRoom()
		n, err := r.Read(s.buf[s.end:])
		s.end += n
		switch {
		case n > 0:
			empty = 0
		case err == nil:
			if empty++; empty >= 100 {
				return fmt.Errorf("gate read: %w", io.ErrNoProgress)
			}
		}
		if err == nil {
			continue
		}
		// The bytes that came with the error are decided on first.
		if derr := g.decide(s); derr != nil {
			return derr
		}
		if err != io.EOF {
			return fmt.Errorf("gate read: %w", err)
		}
		switch {
		case s.skipping:
			return newFault(reasonCut, s.skipFrom, s.skipHead)
		case s.start < s.end:
			return newFault(reasonCut, s.base+int64(s.start), s.buf[s.start:s.end])
		}
		return nil
	}
}

// decide decides on every complete line buffered, and on the partial line when it has
// reached the limit.
func (g *Gate) decide(s *splitter) error {
	for {
		k := bytes.IndexByte(s.buf[s.scan:s.end], '\n')
		if s.skipping {
			if k < 0 {
				s.base += int64(s.end)
				s.start, s.end, s.scan = 0, 0, 0
				return nil
			}
			s.skipping = false
			s.start = s.scan + k + 1
			s.scan = s.start
			continue
		}
		if k < 0 {
			s.scan = s.end
			if s.end-s.start < g.lim.maxLine {
				return nil
			}
			// maxLine bytes and no newline yet: with its newline the line is over the limit.
			from := s.base + int64(s.start)
			if err := g.oversized(s.buf[s.start:s.end], from); err != nil {
				return err
			}
			s.skipping, s.skipFrom = true, from
			s.skipHead = append(s.skipHead[:0], s.buf[s.start:s.start+min(maxFaultHead, s.end-s.start)]...)
			s.base += int64(s.end)
			s.start, s.end, s.scan = 0, 0, 0
			return nil
		}
		nl := s.scan + k
		from := s.base + int64(s.start)
		var err error
		if nl-s.start >= g.lim.maxLine {
			err = g.oversized(s.buf[s.start:nl], from)
		} else {
			err = g.line(s.buf[s.start:nl], from)
		}
		if err != nil {
			return err
		}
		s.start = nl + 1
		s.scan = s.start
	}
}

// makeRoom prepares the buffer for a read: it drops what is decided, moves a partial
// line to the front when the tail is short, grows the buffer for a long line (up to
// maxBuf) and shrinks it back after one.
func (s *splitter) makeRoom() {
	if s.start == s.end {
		s.base += int64(s.end)
		s.start, s.end, s.scan = 0, 0, 0
	}
	if len(s.buf) > retainBuf {
		// Shrink once the long lines have been gone for a while, not between two of them.
		if s.end-s.start > retainBuf/2 {
			s.calm = 0
		} else if s.calm++; s.calm >= shrinkAfter {
			s.moveTo(make([]byte, retainBuf))
			s.calm = 0
		}
	}
	if len(s.buf)-s.end >= minRead {
		return
	}
	if s.start > 0 {
		s.moveTo(s.buf)
	}
	if len(s.buf)-s.end < minRead && len(s.buf) < s.maxBuf {
		nb := make([]byte, min(max(2*len(s.buf), 2*(s.end-s.start)+minRead), s.maxBuf))
		s.moveTo(nb)
	}
}

// moveTo copies the undecided bytes to the front of nb and makes nb the buffer.
func (s *splitter) moveTo(nb []byte) {
	n := copy(nb, s.buf[s.start:s.end])
	s.base += int64(s.start)
	s.scan -= s.start
	s.start, s.end = 0, n
	s.buf = nb
}
