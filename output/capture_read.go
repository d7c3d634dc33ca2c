package output

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// Page is one page of a Capture's output: the bytes [Offset, Offset+len(Data)).
//
// A page is short (fewer bytes than the limit asked for) only when it reaches Seen, the
// end of what was written when it was read; then exactly one of EOF and More is true:
// EOF when the capture is closed (nothing will follow), More when it is still being
// written (a later read at Offset+len(Data) may return more). A page that ends before
// Seen has neither flag.
type Page struct {
	Offset int64
	Data   []byte
	// Seen is the number of bytes written when the page was read.
	Seen int64
	EOF  bool
	More bool
}

// ReadPage returns up to limit bytes from offset. It never shortens a page silently: a
// limit over MaxPage (ErrPageTooLarge) and a page that would cross bytes that were not
// retained (ErrLost) are refused with a *ReadError naming a read that works. A negative
// offset or limit is ErrInvalidRange. An offset past the end of a closed capture is
// ErrPastEnd; past the end of a running one it returns an empty page with More. A spill
// file that is missing or shorter than what was written to it is ErrSpillLost.
//
// ReadPage may run while writes go on; it holds the capture's lock only to copy bytes
// from the in-memory tail.
func (c *Capture) ReadPage(offset, limit int64) (Page, error) {
	refuse := func(class error, detail string, use *Span) (Page, error) {
		return Page{}, &ReadError{Op: "read", Offset: offset, Limit: limit, Err: class, Detail: detail, Use: use}
	}
	if offset < 0 || limit < 0 {
		return refuse(ErrInvalidRange, "offset and limit must not be negative", nil)
	}
	if limit > MaxPage {
		return refuse(ErrPageTooLarge, fmt.Sprintf("read at most %d bytes", MaxPage), &Span{offset, MaxPage})
	}

	c.mu.Lock()
	st := c.statLocked()
	if offset > st.Seen {
		c.mu.Unlock()
		if st.Closed {
			return refuse(ErrPastEnd, fmt.Sprintf("the output ends at byte %d", st.Seen), nil)
		}
		return Page{Offset: offset, Seen: st.Seen, More: true}, nil
	}
	end := min(offset+limit, st.Seen)
	if !(end <= st.Retained || offset >= st.TailFrom || st.Complete) {
		c.mu.Unlock()
		detail, use := lostDetail(offset, st)
		return refuse(ErrLost, detail, use)
	}
	page := Page{Offset: offset, Seen: st.Seen, Data: make([]byte, end-offset)}
	page.EOF = end == st.Seen && st.Closed
	page.More = end == st.Seen && !st.Closed
	plen := int64(len(c.prefixOf(st)))
	rest := c.copyLocked(st, offset, page.Data)
	c.mu.Unlock()

	if err := rest(); err != nil {
		return refuse(ErrSpillLost, err.Error(), &Span{0, min(plen, MaxPage)})
	}
	return page, nil
}

// copyLocked fills dst with the bytes [off, off+len(dst)) of the output, a range the
// caller checked is retained by st, the stat it took under c.mu, which it still holds.
// The tail's part (at most TailBytes, which later writes overwrite) is copied at once; the
// prefix's part (bytes that never change) and the spill file's part are copied by the
// returned function, which the caller runs once c.mu is released. Its error is the spill
// file's.
func (c *Capture) copyLocked(st CaptureStat, off int64, dst []byte) func() error {
	end := off + int64(len(dst))
	prefix := c.prefixOf(st)
	plen := int64(len(prefix))
	ringFrom := max(st.TailFrom, plen)
	if end > ringFrom {
		from := max(off, ringFrom)
		d := dst[from-off:]
		pos := (from - c.prefixCap) % c.tailCap
		for len(d) > 0 {
			n := copy(d, c.ring[pos:])
			d = d[n:]
			pos = 0
		}
	}
	spillPath := c.spillPath
	return func() error {
		if off < plen {
			copy(dst, prefix[off:min(end, plen)])
		}
		if from, to := max(off, plen), min(end, ringFrom); from < to {
			return readSpill(spillPath, dst[from-off:to-off], from)
		}
		return nil
	}
}

// prefixOf is the memory prefix as of st: its bytes never change. The caller holds c.mu.
func (c *Capture) prefixOf(st CaptureStat) []byte {
	n := min(int64(len(c.prefix)), st.Seen)
	return c.prefix[:n:n]
}

// lostDetail describes the lost bytes a read at offset would cross and names a read that
// works: the retained part from offset, or the tail when offset is inside the gap.
func lostDetail(offset int64, st CaptureStat) (string, *Span) {
	detail := fmt.Sprintf("bytes %d..%d of %d were not retained", st.Retained, st.TailFrom-1, st.Seen)
	if st.SpillErr != nil {
		detail += fmt.Sprintf(" (spill failed: %v)", st.SpillErr)
	}
	if offset < st.Retained {
		return detail, &Span{offset, min(st.Retained-offset, MaxPage)}
	}
	return detail, &Span{st.TailFrom, min(st.Seen-st.TailFrom, MaxPage)}
}

// readSpill fills p from the spill file at off. A missing file or one shorter than
// off+len(p) is an error: the bytes were written there.
func readSpill(path string, p []byte, off int64) error {
	if path == "" {
		return errors.New("no spill file")
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("open spill: %w", err)
	}
	defer f.Close()
	if _, err := f.ReadAt(p, off); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("spill %s is shorter than %d bytes", path, off+int64(len(p)))
		}
		return fmt.Errorf("read spill: %w", err)
	}
	return nil
}
