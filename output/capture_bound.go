package output

import (
	"fmt"
	"unicode/utf8"
)

// Bound returns the output written so far (all of it once the capture is closed) bounded
// by t, built from what the capture retains, for one report: the capture keeps no
// report, so what it holds stays its prefix and its tail, whatever t is. It refuses an
// invalid t (ErrInvalidLimits).
//
// The counts are exact: KeptBytes + DroppedBytes is every byte written (Seen) and
// KeptLines + DroppedLines every line. The window is the window rule's (Bound of every
// byte written) whenever the bytes it comes from, the first (Head) or last (Tail)
// Bytes+1, are retained: always while every byte is (CaptureStat.Complete), and always
// for Head limits under PrefixBytes and Tail limits under TailBytes (the defaults are).
// Otherwise it is the window the same rule gives over the retained bytes at that end,
// smaller than the limits allow. Under Off, Kept is every byte when every byte was
// retained; otherwise it is the retained start [0, Retained) (less a character cut at its
// end) and the rest is dropped: Off cannot keep more than the capture retained.
//
// When not every byte was retained, Retained lists the readable ranges (ReadPage reads
// them) and ArtifactErr is why the spill failed, if it did; Where is left to the owner.
// A spill file that cannot be read back makes the report from the bytes in memory alone.
func (c *Capture) Bound(t Truncation) (Result, error) {
	if err := t.Validate(); err != nil {
		return Result{}, fmt.Errorf("bound capture: %w", err)
	}
	var spillErr error
	for {
		r, err := c.bound(t, spillErr != nil)
		if err == nil {
			if spillErr != nil && r.Retained != nil {
				r.ArtifactErr = spillErr
			}
			return r, nil
		}
		spillErr = err // once: the second round reads no file
	}
}

// bound is Bound over the capture as it is now; memOnly leaves the spill file out, as if
// it had failed. Its error is the spill file's.
func (c *Capture) bound(t Truncation, memOnly bool) (Result, error) {
	c.mu.Lock()
	st := c.statLocked()
	if memOnly {
		st.Retained = int64(len(c.prefixOf(st)))
		st.Complete = st.Retained >= st.TailFrom
		st.SpillPath = ""
	}
	w := chooseView(st, t)
	buf := make([]byte, w.hi-w.lo)
	rest := c.copyLocked(st, w.lo, buf)
	c.mu.Unlock()
	if err := rest(); err != nil {
		return Result{}, err
	}

	r := Result{Off: t.IsOff(), TotalBytes: st.Seen, TotalLines: st.Lines}
	if !st.Complete {
		r.ArtifactErr = st.SpillErr
		r.Retained = []Span{{0, st.Retained}}
		if st.Seen > st.TailFrom {
			r.Retained = append(r.Retained, Span{st.TailFrom, st.Seen - st.TailFrom})
		}
	}
	if t.IsOff() {
		if w.whole {
			r.fill(buf, true)
			return r, nil
		}
		kept := buf[:cutIncomplete(buf)]
		r.fill(kept, false)
		r.KeptLines = int64(countNewlines(kept)) // the lines every byte of which is kept
		r.DroppedLines = r.TotalLines - r.KeptLines
		return r, nil
	}
	r.fillWindow(buf, w.whole, w.lim)
	return r, nil
}

// view is the bytes [lo, hi) of an output a report is made from, and the limits the
// window rule applies to them. whole says the view is the whole output (Off), or starts
// (Tail) or ends (Head) where the output does.
type view struct {
	lo, hi int64
	whole  bool
	lim    Limits
}

// chooseView picks what a report of st under t reads: the bytes the window comes from
// when they are retained, else the retained bytes at the window's end with the limits
// narrowed to them.
func chooseView(st CaptureStat, t Truncation) view {
	s := st.Seen
	if t.IsOff() {
		if st.Complete {
			return view{0, s, true, Limits{}}
		}
		return view{0, st.Retained, false, Limits{}}
	}
	l := t.Limits()
	n := min(s, l.Bytes+1)
	if l.Keep == Head {
		if n <= st.Retained || st.Complete {
			return view{0, n, n == s, l}
		}
		l.Bytes = max(st.Retained-1, 0)
		return view{0, st.Retained, false, l}
	}
	if s-n >= st.TailFrom || st.Complete {
		return view{s - n, s, n == s, l}
	}
	l.Bytes = max(s-st.TailFrom-1, 0)
	return view{st.TailFrom, s, st.TailFrom == 0, l}
}

// cutIncomplete returns the length of buf without a last UTF-8 character that buf cuts
// short (its start byte is there, not all of it); len(buf) when there is none.
func cutIncomplete(buf []byte) int {
	for i := len(buf) - 1; i >= 0 && i > len(buf)-utf8.UTFMax; i-- {
		if utf8.RuneStart(buf[i]) {
			if !utf8.FullRune(buf[i:]) {
				return i
			}
			break
		}
	}
	return len(buf)
}
