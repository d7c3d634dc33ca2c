package output

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"sync"
	"time"
)

// Retention defaults of a Capture, and the page size of its reads.
const (
	DefaultPrefixBytes = 1 << 20             // kept in memory from offset 0
	DefaultTailBytes   = 64 << 10            // the rolling last bytes kept in memory
	DefaultSpillLimit  = 16 << 20            // bytes kept on disk, from offset 0
	MaxPage            = 64 << 10            // the most one ReadPage returns
	SpillKeep          = 14 * 24 * time.Hour // spill files older than this are pruned
)

// CaptureOptions configure a Capture. Zero fields take the defaults.
type CaptureOptions struct {
	// SpillDir is a private directory (see PrepareDir) for the spill file. Empty: no
	// spill; bytes past the prefix are kept only while they are in the tail.
	SpillDir string
	// PrefixBytes is how many bytes from offset 0 stay in memory (DefaultPrefixBytes).
	PrefixBytes int64
	// TailBytes is how many of the last bytes stay in memory once the output is longer
	// than the prefix (DefaultTailBytes).
	TailBytes int64
	// SpillLimit is how many bytes from offset 0 the spill file holds at most
	// (DefaultSpillLimit); later bytes are counted, not kept, except in the tail.
	SpillLimit int64
}

// Capture is the retained output of one cell or job: the first PrefixBytes in memory
// and, once more than that has arrived, the last TailBytes in a rolling tail. Past the
// prefix it spills to a private (0600) file holding every byte from offset 0 up to
// SpillLimit. Seen counts every byte written.
//
// Write is never held up by readers: a reader holds the capture's lock only to copy
// bytes of the in-memory tail (at most one page, or the tail for Bound); it copies the
// prefix (whose bytes never change) and reads the spill file outside it. Writes may come
// from several goroutines; they are applied in the order they take the lock. ReadPage,
// Bound, Stat and Save may be called at any time from any goroutine, also while writes go
// on.
//
// A spill failure (create or write) does not stop the writer: it is recorded, the spill
// file is removed, and pages beyond the retained prefix (and Save) then refuse.
type Capture struct {
	prefixCap, tailCap, spillCap int64
	dir                          string

	wmu   sync.Mutex // serializes writers and Close; guards spill
	spill *os.File

	mu        sync.Mutex // guards what follows
	seen      int64
	newlines  int64  // '\n' bytes in [0, seen)
	last      byte   // the byte at seen-1
	prefix    []byte // bytes [0, len(prefix)); appended to only
	ring      []byte // bytes [max(prefixCap, seen-tailCap), seen) at (off-prefixCap)%tailCap
	spillPath string
	spilled   int64 // bytes [0, spilled) are in the spill file
	spillErr  error
	closed    bool
	frozen    bool  // a Skip came before the end of what is retained from offset 0
	tailFloor int64 // the tail never starts below it: the end of the last Skip
}

// NewCapture returns an empty, open Capture. It refuses a spill directory that is not
// private (ErrNotPrivate) and negative sizes (ErrInvalidRange); it creates no file until
// the output passes the prefix.
func NewCapture(opts CaptureOptions) (*Capture, error) {
	m, err := NewCaptures(opts)
	if err != nil {
		return nil, err
	}
	return m.New(), nil
}

// Captures makes the Captures of one CaptureOptions, checked once: a job table makes one
// capture per job, and a job's start then costs no file-system call.
type Captures struct {
	opts CaptureOptions // sizes resolved
}

// NewCaptures checks opts as NewCapture does: it refuses a spill directory that is not
// private (ErrNotPrivate) and negative sizes (ErrInvalidRange).
func NewCaptures(opts CaptureOptions) (*Captures, error) {
	opts.PrefixBytes = cmp.Or(opts.PrefixBytes, DefaultPrefixBytes)
	opts.TailBytes = cmp.Or(opts.TailBytes, DefaultTailBytes)
	opts.SpillLimit = cmp.Or(opts.SpillLimit, DefaultSpillLimit)
	if opts.PrefixBytes < 0 || opts.TailBytes < 0 || opts.SpillLimit < 0 {
		return nil, fmt.Errorf("new capture: sizes %d/%d/%d: %w", opts.PrefixBytes, opts.TailBytes, opts.SpillLimit, ErrInvalidRange)
	}
	opts.SpillLimit = max(opts.SpillLimit, opts.PrefixBytes)
	if opts.SpillDir != "" {
		if err := checkPrivateDir(opts.SpillDir); err != nil {
			return nil, fmt.Errorf("new capture: %w", err)
		}
	}
	return &Captures{opts: opts}, nil
}

// Retains is how many bytes from offset 0 each capture of m retains: its SpillLimit with
// a spill directory, else its PrefixBytes.
func (m *Captures) Retains() int64 {
	if m.opts.SpillDir != "" {
		return m.opts.SpillLimit
	}
	return m.opts.PrefixBytes
}

// New returns an empty, open Capture with m's options. It makes no system call: the
// spill directory, checked by NewCaptures, is checked again right before the capture
// creates its spill file, and a directory that is no longer private then fails the spill
// (recorded in the capture's stat; the output stays in memory as far as it is retained).
func (m *Captures) New() *Capture {
	o := m.opts
	return &Capture{prefixCap: o.PrefixBytes, tailCap: o.TailBytes, spillCap: o.SpillLimit, dir: o.SpillDir}
}

// Write appends p. It consumes all of p and returns len(p), nil, whatever happens to the
// spill; after Close it returns 0 and an ErrClosed error and keeps nothing.
func (c *Capture) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	closed, start, spillErr, frozen := c.closed, c.seen, c.spillErr, c.frozen
	c.mu.Unlock()
	if closed {
		return 0, fmt.Errorf("write capture: %w", ErrClosed)
	}
	if len(p) == 0 {
		return 0, nil
	}
	end := start + int64(len(p))
	newlines := int64(bytes.Count(p, []byte{'\n'})) // counted outside c.mu

	// Disk first, outside c.mu: readers only ever see spilled bytes that are written.
	spilled, spillPath := int64(-1), ""
	if c.dir != "" && spillErr == nil && !frozen && end > c.prefixCap && start < c.spillCap {
		if c.spill == nil {
			if spillErr = c.openSpill(start); spillErr == nil { // it wrote the prefix [0, start)
				spillPath = c.spill.Name()
			}
		}
		if spillErr == nil {
			n := min(end, c.spillCap) - start
			if _, err := c.spill.Write(p[:n]); err != nil {
				spillErr = c.failSpill(fmt.Errorf("write spill: %w", err))
			} else {
				spilled = start + n
			}
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if spillPath != "" && spillErr == nil {
		c.spillPath = spillPath
	}
	if spillErr != nil && c.spillErr == nil {
		c.spillErr = spillErr
		c.spillPath = ""
	}
	if spilled >= 0 && c.spillErr == nil {
		c.spilled = spilled
	}
	if start < c.prefixCap && !frozen {
		n := min(end, c.prefixCap) - start
		if need := int64(len(c.prefix)) + n; need > int64(cap(c.prefix)) {
			// Grow as append would, but never past the prefix cap: what a capture holds
			// is its prefix and its tail, not a doubling's slack. The old array stays
			// valid for readers that took it (its bytes never change).
			grown := make([]byte, len(c.prefix), min(max(need, 2*int64(cap(c.prefix))), c.prefixCap))
			copy(grown, c.prefix)
			c.prefix = grown
		}
		c.prefix = append(c.prefix, p[:n]...)
	}
	if end > c.prefixCap && c.tailCap > 0 {
		if c.ring == nil {
			c.ring = make([]byte, c.tailCap)
		}
		from := max(start, c.prefixCap, end-c.tailCap) // the first byte of p the ring keeps
		q := p[from-start:]
		pos := (from - c.prefixCap) % c.tailCap
		for len(q) > 0 {
			n := copy(c.ring[pos:], q)
			q = q[n:]
			pos = 0
		}
	}
	c.seen = end
	c.newlines += newlines
	c.last = p[len(p)-1]
	return len(p), nil
}

// Skip counts n bytes as written and lost: bytes the output had that nobody can read
// any more (a job's output file whose consumed part an earlier controller punched). They
// are in Seen, never readable, and the tail starts after them. A capture still
// retaining from offset 0 (Seen below its prefix, or below its spill limit while it
// spills) retains nothing more from there: bytes after the gap are kept only in the tail.
// Lines counts the lines of the bytes written, not of the lost ones. After Close it is
// ErrClosed; n <= 0 changes nothing.
func (c *Capture) Skip(n int64) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("skip capture: %w", ErrClosed)
	}
	if n <= 0 {
		return nil
	}
	if c.seen < c.prefixCap || c.dir != "" && c.spillErr == nil && c.seen < c.spillCap {
		c.frozen = true
	}
	c.seen += n
	c.tailFloor = c.seen
	return nil
}

// openSpill checks the spill directory again, creates the spill file and writes the
// first n bytes (all in the prefix) to it. The caller holds wmu.
func (c *Capture) openSpill(n int64) error {
	if err := checkPrivateDir(c.dir); err != nil {
		return fmt.Errorf("create spill: %w", err)
	}
	f, err := os.CreateTemp(c.dir, "kennel-spill-*")
	if err != nil {
		return fmt.Errorf("create spill: %w", err)
	}
	c.spill = f
	c.mu.Lock()
	head := c.prefix[:n:n] // prefix bytes below n never change
	c.mu.Unlock()
	if _, err := f.Write(head); err != nil {
		return c.failSpill(fmt.Errorf("write spill: %w", err))
	}
	return nil
}

// failSpill closes and removes the spill file and returns err. The caller holds wmu.
func (c *Capture) failSpill(err error) error {
	if c.spill != nil {
		_ = c.spill.Close()
		_ = os.Remove(c.spill.Name())
		c.spill = nil
	}
	return err
}

// Close ends the output: later writes fail, reads at the end report EOF, and Save may
// run. It closes the spill file's writer (the file stays for reads and is removed only by
// Prune). Close is idempotent; it returns an error only when closing the spill file
// failed, which is also recorded as a spill failure.
func (c *Capture) Close() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var err error
	if c.spill != nil {
		if cerr := c.spill.Close(); cerr != nil {
			err = fmt.Errorf("close spill: %w", cerr)
		}
		c.spill = nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil && c.spillErr == nil {
		c.spillErr = err
	}
	c.closed = true
	return err
}

// CaptureStat describes a Capture at one moment.
type CaptureStat struct {
	// Seen counts every byte written.
	Seen int64
	// Lines counts the lines written: the '\n' bytes, plus one for a last line without
	// '\n'.
	Lines int64
	// Closed reports that writing has ended.
	Closed bool
	// Retained is the readable prefix [0, Retained): the memory prefix, or the spill file
	// when it holds more.
	Retained int64
	// TailFrom is where the in-memory tail starts: [TailFrom, Seen) is readable too.
	// It equals Seen when there is no tail.
	TailFrom int64
	// Complete reports that every byte in [0, Seen) is readable.
	Complete bool
	// SpillPath is the spill file, or "" when there is none (no spill yet, or it failed).
	SpillPath string
	// SpillErr is why the spill failed, or nil.
	SpillErr error
}

// Stat returns what the capture holds now.
func (c *Capture) Stat() CaptureStat {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.statLocked()
}

func (c *Capture) statLocked() CaptureStat {
	s := CaptureStat{Seen: c.seen, Lines: c.newlines, Closed: c.closed, SpillPath: c.spillPath, SpillErr: c.spillErr}
	if c.seen > 0 && c.last != '\n' {
		s.Lines++
	}
	s.Retained = int64(len(c.prefix))
	if c.spillErr == nil && c.spilled > s.Retained {
		s.Retained = c.spilled
	}
	s.TailFrom = c.seen
	if c.seen > c.prefixCap && c.tailCap > 0 {
		s.TailFrom = max(c.prefixCap, c.seen-c.tailCap, c.tailFloor)
	}
	s.Complete = s.Retained >= s.TailFrom
	return s
}
