package output

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// Save writes the capture's exact bytes to path and returns path made absolute. It
// streams them in MaxPage chunks into a temporary 0600 file beside path, syncs it and
// renames it over path, so path is either untouched or complete. It refuses, leaving
// path untouched and no temporary file behind, a capture that is still running
// (ErrRunning), one that lost output (ErrLost: past the spill limit, or the spill failed),
// and a spill file that is missing or shortened (ErrSpillLost). Save stops between chunks
// when ctx ends.
func (c *Capture) Save(ctx context.Context, path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("save output %s: %w", path, err)
	}
	st := c.Stat()
	refuse := func(class error, detail string, use *Span) (string, error) {
		return "", fmt.Errorf("save output %s: %w", abs, &ReadError{Op: "save", Offset: 0, Limit: st.Seen, Err: class, Detail: detail, Use: use})
	}
	if !st.Closed {
		return refuse(ErrRunning, fmt.Sprintf("the output is still being written (%d bytes so far); save it once it has ended", st.Seen), nil)
	}
	if !st.Complete {
		detail, _ := lostDetail(st.Retained, st)
		return refuse(ErrLost, detail+"; the retained prefix can be read by pages", &Span{0, min(st.Retained, MaxPage)})
	}

	tmp, err := os.CreateTemp(filepath.Dir(abs), "."+filepath.Base(abs)+".tmp-*")
	if err == nil {
		if err = c.writeTo(ctx, tmp, st.Seen); err == nil {
			err = os.Rename(tmp.Name(), abs)
		}
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}
	if err != nil {
		return "", fmt.Errorf("save output %s: %w", abs, err)
	}
	return abs, nil
}

// writeTo writes the first n bytes of the capture to f page by page, stopping between
// pages when ctx ends, then syncs and closes f.
func (c *Capture) writeTo(ctx context.Context, f *os.File, n int64) error {
	for off := int64(0); off < n; {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		page, err := c.ReadPage(off, min(MaxPage, n-off))
		if err != nil {
			return err
		}
		if _, err := f.Write(page.Data); err != nil {
			return err
		}
		off += int64(len(page.Data))
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}
