package output

import (
	"bytes"
	"fmt"
	"io"
)

// Follower writes a capture's bytes to a writer while they arrive, within the window a
// truncation will report of them: every byte under Off; under On with Head the whole
// lines of the head window that end within the capture's in-memory prefix (less one byte),
// the part of the window every report keeps, whatever later happens to the spill; nothing
// under Tail (a tail window is known only at the end). Poll writes what arrived since the
// last call; Finish writes the rest of the settled report, so that the writer receives
// exactly the report's Kept bytes. It reads the capture by pages and never holds up the
// capture's writers. A Follower is for one goroutine at a time.
//
// Why the prefix: a report of output that outgrew what the capture retains is made from
// the retained start alone, and keeps one byte less than it (Capture.Bound); the retained
// start is at least the prefix, but more only while the spill file lasts.
type Follower struct {
	c       *Capture
	off     bool
	lim     Limits
	w       io.Writer
	read    int64  // capture bytes read
	written int64  // bytes written to w
	lines   int64  // whole lines written (head)
	pending []byte // head: the start of a line not yet written
	stopped bool   // nothing more is written before Finish
}

// NewFollower returns a follower of c under t, the truncation its report will be bounded
// by (for a job, Resolve of the session's and the job's own), writing to w.
func NewFollower(c *Capture, t Truncation, w io.Writer) *Follower {
	f := &Follower{c: c, off: t.IsOff(), lim: t.Limits(), w: w}
	f.stopped = !f.off && f.lim.Keep == Tail
	// A window past the prefix is written by Finish (see Follower).
	f.lim.Bytes = min(f.lim.Bytes, c.prefixCap-1)
	return f
}

// Poll writes the bytes that arrived since the last call, as far as the window allows.
// Bytes that were not retained (a follower that fell more than the spill limit behind)
// stop the writing until Finish; an error is the writer's.
func (f *Follower) Poll() error {
	for !f.stopped {
		p, err := f.c.ReadPage(f.read, MaxPage)
		if err != nil {
			f.stopped = true // lost or unreadable: Finish writes the rest from the report
			return nil
		}
		f.read += int64(len(p.Data))
		if err := f.take(p.Data); err != nil {
			return err
		}
		if len(p.Data) < MaxPage {
			return nil
		}
	}
	return nil
}

// take writes what of data the window allows.
func (f *Follower) take(data []byte) error {
	if f.off {
		return f.write(data)
	}
	f.pending = append(f.pending, data...)
	for {
		i := bytes.IndexByte(f.pending, '\n')
		if i < 0 {
			if int64(len(f.pending)) > f.lim.Bytes-f.written {
				f.stopped, f.pending = true, nil
			}
			return nil
		}
		line := f.pending[:i+1]
		if f.written+int64(len(line)) > f.lim.Bytes || f.lines+1 > f.lim.Lines {
			f.stopped, f.pending = true, nil
			return nil
		}
		if err := f.write(line); err != nil {
			return err
		}
		f.lines++
		f.pending = f.pending[i+1:]
	}
}

func (f *Follower) write(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	n, err := f.w.Write(p)
	f.written += int64(n)
	if err != nil {
		return fmt.Errorf("follow output: %w", err)
	}
	return nil
}

// Finish writes the rest of r, the settled report of the capture under the follower's
// truncation (for a job, jobs.Settled.Output): the writer then holds exactly r.Kept, or
// under Off at least r.Kept (the follower may have streamed more than the capture
// retains: every byte it wrote is the capture's, in order). It reads nothing more from
// the capture. A report shorter than what was written already is an error, and nothing
// more is written.
func (f *Follower) Finish(r Result) error {
	f.stopped, f.pending = true, nil
	if f.written > int64(len(r.Kept)) {
		if f.off {
			return nil
		}
		return fmt.Errorf("follow output: wrote %d bytes, the report keeps %d", f.written, len(r.Kept))
	}
	return f.write(r.Kept[f.written:])
}
