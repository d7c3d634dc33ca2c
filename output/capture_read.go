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
// from memory.
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

	// [offset, end) = memory prefix, then spill, then ring.
	plen := int64(len(c.prefix))
	ringFrom := max(st.TailFrom, plen)
	if offset < plen {
		copy(page.Data, c.prefix[offset:min(end, plen)])
	}
	if end > ringFrom {
		from := max(offset, ringFrom)
		dst := page.Data[from-offset:]
		pos := (from - c.prefixCap) % c.tailCap
		for len(dst) > 0 {
			n := copy(dst, c.ring[pos:])
			dst = dst[n:]
			pos = 0
		}
	}
	spillPath := c.spillPath
	c.mu.Unlock()

	if from, to := max(offset, plen), min(end, ringFrom); from < to {
		if err := readSpill(spillPath, page.Data[from-offset:to-offset], from); err != nil {
			return refuse(ErrSpillLost, err.Error(), &Span{0, min(plen, MaxPage)})
		}
	}
	return page, nil
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
