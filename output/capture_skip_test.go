package output

import (
	"bytes"
	"errors"
	"testing"

	"pgregory.net/rapid"
)

// TestPropSkippedBytesAreCountedAndNeverRead: writes and skips (bytes written and lost)
// in any order and size, with or without a spill: Seen is every byte of both, a page
// read anywhere is either refused or exactly the written bytes at its offsets (never a
// byte of a skip), the tail after the last skip is readable as the model keeps it, and
// without a skip the capture reads as it always did.
func TestPropSkippedBytesAreCountedAndNeverRead(t *testing.T) {
	dir := privateTempDir(t)
	rapid.Check(t, func(t *rapid.T) {
		opts := CaptureOptions{
			PrefixBytes: rapid.Int64Range(1, 64).Draw(t, "prefix"),
			TailBytes:   rapid.Int64Range(1, 64).Draw(t, "tail"),
			SpillLimit:  rapid.Int64Range(1, 160).Draw(t, "spill"),
		}
		if rapid.Bool().Draw(t, "spills") {
			opts.SpillDir = dir
		}
		c, err := NewCapture(opts)
		if err != nil {
			t.Fatal(err)
		}
		var all []byte  // the output as written, a skip's bytes as 0
		var lost []bool // which of all's bytes were skipped
		lastSkipEnd := int64(-1)
		for i, n := 0, rapid.IntRange(1, 30).Draw(t, "ops"); i < n; i++ {
			size := rapid.IntRange(0, 50).Draw(t, "size")
			if rapid.IntRange(0, 3).Draw(t, "kind") == 0 {
				if err := c.Skip(int64(size)); err != nil {
					t.Fatal(err)
				}
				all = append(all, make([]byte, size)...)
				for range size {
					lost = append(lost, true)
				}
				if size > 0 {
					lastSkipEnd = int64(len(all))
				}
				continue
			}
			p := bytes.Repeat([]byte{byte('a' + i%26)}, size)
			for j := range p {
				p[j] += byte(j % 3)
			}
			if _, err := c.Write(p); err != nil {
				t.Fatal(err)
			}
			all = append(all, p...)
			for range size {
				lost = append(lost, false)
			}
		}
		if rapid.Bool().Draw(t, "close") {
			_ = c.Close()
		}
		st := c.Stat()
		if st.Seen != int64(len(all)) {
			t.Fatalf("Seen %d, want %d", st.Seen, len(all))
		}
		if lastSkipEnd >= 0 && st.Complete {
			t.Fatalf("complete after a skip: %+v", st)
		}
		for off := int64(0); off < int64(len(all)); off++ {
			p, err := c.ReadPage(off, 1)
			if err != nil {
				var re *ReadError
				if !errors.As(err, &re) || !errors.Is(err, ErrLost) {
					t.Fatalf("read at %d: %v", off, err)
				}
				continue
			}
			if lost[off] {
				t.Fatalf("byte %d of a skip read as %q (stat %+v)", off, p.Data, st)
			}
			if len(p.Data) != 1 || p.Data[0] != all[off] {
				t.Fatalf("byte %d read %q, want %q", off, p.Data, all[off:off+1])
			}
		}
		// The last bytes after the last skip, as many as the tail holds, are readable
		// once they are past the prefix.
		if lastSkipEnd >= 0 {
			from := max(lastSkipEnd, int64(len(all))-opts.TailBytes, opts.PrefixBytes)
			for off := from; off < int64(len(all)); off++ {
				if _, err := c.ReadPage(off, 1); err != nil {
					t.Fatalf("tail byte %d (after the last skip at %d): %v", off, lastSkipEnd, err)
				}
			}
		}
	})
}
