package output

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"
)

// TestPropCaptureBoundIsTheWindowOfWhatItRetained writes generated text through a
// capture with small caps (with and without a spill directory) and checks its report
// after every write and after the close: exact counts always; the whole text's window
// when the bytes it comes from were retained, else a run of retained bytes at the
// window's end; under Off every byte exactly when every byte was retained; and Retained
// naming what ReadPage reads.
func TestPropCaptureBoundIsTheWindowOfWhatItRetained(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := model{
			prefix: rapid.Int64Range(1, 40).Draw(t, "prefix"),
			tail:   rapid.Int64Range(1, 20).Draw(t, "tail"),
			spill:  rapid.Int64Range(1, 120).Draw(t, "spill"),
		}
		m.spill = max(m.spill, m.prefix)
		opts := CaptureOptions{PrefixBytes: m.prefix, TailBytes: m.tail, SpillLimit: m.spill}
		if rapid.Bool().Draw(t, "spill dir") {
			opts.SpillDir = privateTempDir(t)
		}
		c, err := NewCapture(opts)
		if err != nil {
			t.Fatal(err)
		}
		tr := genTruncation(t)
		var text []byte
		check := func() {
			st := c.Stat()
			r, err := c.Bound(tr)
			if err != nil {
				t.Fatal(err)
			}
			whole, _ := Bound(text, tr)
			if r.TotalBytes != whole.TotalBytes || r.TotalLines != whole.TotalLines || st.Lines != whole.TotalLines ||
				r.KeptBytes+r.DroppedBytes != r.TotalBytes || r.KeptLines+r.DroppedLines != r.TotalLines || r.KeptBytes != int64(len(r.Kept)) {
				t.Fatalf("report %+v not conserved for %d bytes, %d lines", r, len(text), whole.TotalLines)
			}
			if retainsWindow(st, tr) {
				if !sameWindow(r, whole) {
					t.Fatalf("report kept %q (%+v), the whole text's window is %q", r.Kept, r, whole.Kept)
				}
			} else {
				n := int64(len(r.Kept))
				head := tr.IsOff() || tr.Limits().Keep == Head
				if head && (n > st.Retained || !bytes.Equal(r.Kept, text[:n])) || !head && (n > st.Seen-st.TailFrom || !bytes.HasSuffix(text, r.Kept)) {
					t.Fatalf("report kept %q: not retained bytes at its end (%+v)", r.Kept, st)
				}
			}
			if tr.IsOff() && r.Truncated() == st.Complete {
				t.Fatalf("off: truncated %v for a capture that retained every byte: %v", r.Truncated(), st.Complete)
			}
			if !tr.IsOff() && (r.KeptBytes > tr.Limits().Bytes || r.KeptLines > tr.Limits().Lines) {
				t.Fatalf("report over the limits: %+v", r)
			}
			if utf8.Valid(text) && !utf8.Valid(r.Kept) {
				t.Fatalf("report %q of valid UTF-8 splits a character", r.Kept)
			}
			if st.Complete != (r.Retained == nil) {
				t.Fatalf("retained %v for complete=%v", r.Retained, st.Complete)
			}
			for _, sp := range r.Retained {
				for off := sp.Offset; off < sp.Offset+sp.Limit; off += MaxPage {
					p, err := c.ReadPage(off, min(MaxPage, sp.Offset+sp.Limit-off))
					if err != nil || !bytes.Equal(p.Data, text[off:off+int64(len(p.Data))]) {
						t.Fatalf("read of retained %+v at %d: %v", sp, off, err)
					}
				}
			}
			if r.Truncated() != (r.Notice() != "") {
				t.Fatalf("notice %q for truncated=%v", r.Notice(), r.Truncated())
			}
		}
		for range rapid.IntRange(0, 12).Draw(t, "writes") {
			p := genText(t, "write")
			if n, err := c.Write(p); n != len(p) || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
			text = append(text, p...)
			check()
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		check()
	})
}

// retainsWindow reports whether a capture of stat st retained the bytes the window of tr
// comes from: every byte (Off), or the first or last Bytes+1.
func retainsWindow(st CaptureStat, tr Truncation) bool {
	if st.Complete {
		return true
	}
	if tr.IsOff() {
		return false
	}
	l := tr.Limits()
	n := min(st.Seen, l.Bytes+1)
	if l.Keep == Head {
		return n <= st.Retained
	}
	return st.Seen-n >= st.TailFrom
}

func TestCaptureBoundUnderOffPastTheSpillLimit(t *testing.T) {
	c := newCapture(t, CaptureOptions{SpillDir: privateTempDir(t), PrefixBytes: 8, TailBytes: 4, SpillLimit: 16})
	writeAll(t, c, []byte("line1\nline2\nlinéé3\nline4\n")) // 27 bytes; the spill limit cuts the first é
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := c.Bound(Off())
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Kept) != "line1\nline2\nlin" || r.DroppedBytes != 27-15 || r.KeptLines != 2 || r.DroppedLines != 2 || !r.Off {
		t.Fatalf("off past the spill limit: kept %q, %+v", r.Kept, r)
	}
	r.Where = "job j1"
	r.ReadWith = "GET /x?offset=&limit="
	want := "[output not retained whole (truncation is off): kept the first 15 of 27 bytes (2 of 4 lines); dropped 12 bytes (2 lines); retained: job j1, bytes 0-15 and the last 4 bytes (23-26) of 27; read with GET /x?offset=&limit=]"
	if n := r.Notice(); n != want {
		t.Fatalf("notice\n got %s\nwant %s", n, want)
	}
}

func TestCaptureBoundCutsNoCharacterUnderOff(t *testing.T) {
	c := newCapture(t, CaptureOptions{SpillDir: privateTempDir(t), PrefixBytes: 4, TailBytes: 2, SpillLimit: 6})
	writeAll(t, c, []byte("abcd€xyz")) // € is bytes 4..6: the spill limit cuts it
	r, err := c.Bound(Off())
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Kept) != "abcd" || r.DroppedBytes != 6 || r.KeptLines != 0 {
		t.Fatalf("kept %q, %+v", r.Kept, r)
	}
}

func TestCaptureBoundWithALostSpillUsesMemory(t *testing.T) {
	c := newCapture(t, CaptureOptions{SpillDir: privateTempDir(t), PrefixBytes: 8, TailBytes: 4, SpillLimit: 32})
	writeAll(t, c, []byte("0123456789abcdefghij"))
	if err := os.Remove(c.Stat().SpillPath); err != nil {
		t.Fatal(err)
	}
	r, err := c.Bound(Off())
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Kept) != "01234567" || r.DroppedBytes != 12 || r.ArtifactErr == nil || len(r.Retained) != 2 || r.Retained[0] != (Span{0, 8}) || r.Retained[1] != (Span{16, 4}) {
		t.Fatalf("report with its spill file gone: kept %q, %+v", r.Kept, r)
	}
	if n := r.Notice(); !strings.Contains(n, "retained: bytes 0-7 and the last 4 bytes (16-19) of 20 (") {
		t.Fatalf("notice %s", n)
	}
	if _, err := c.Bound(On(Limits{Bytes: -1})); !errors.Is(err, ErrInvalidLimits) {
		t.Fatalf("an invalid truncation: %v", err)
	}
}

func TestNoticeNamesTheReadWhenWhole(t *testing.T) {
	r := mustBound(t, "one\ntwo\nthree\n", On(Limits{Bytes: 100, Lines: 1}))
	r.Where, r.ReadWith = "job j2", "GET /sessions/s1/jobs/j2/output?offset=&limit="
	want := "[output truncated: kept the first 4 of 14 bytes (1 of 3 lines); dropped 10 bytes (2 lines); full output: job j2; read with GET /sessions/s1/jobs/j2/output?offset=&limit=]"
	if r.Notice() != want {
		t.Fatalf("notice\n got %s\nwant %s", r.Notice(), want)
	}
}

// TestCaptureBoundWhileWritesGoOn reports a capture while a writer fills it past its
// spill limit: every report is conserved and its kept bytes are the output's own.
func TestCaptureBoundWhileWritesGoOn(t *testing.T) {
	c := newCapture(t, CaptureOptions{SpillDir: privateTempDir(t), PrefixBytes: 1000, TailBytes: 100, SpillLimit: 5000})
	line := []byte("0123456789abcdef\n")
	const writes = 2000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range writes {
			if _, err := c.Write(line); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	trs := []Truncation{Off(), Default(), On(Limits{Bytes: 50, Keep: Tail}), On(Limits{Bytes: 4000, Keep: Tail})}
	for i := 0; ; i++ {
		finished := false
		select {
		case <-done:
			finished = true
		default:
		}
		r, err := c.Bound(trs[i%len(trs)])
		if err != nil {
			t.Fatal(err)
		}
		if r.KeptBytes+r.DroppedBytes != r.TotalBytes || r.KeptLines+r.DroppedLines != r.TotalLines || r.TotalBytes%int64(len(line)) != 0 {
			t.Fatalf("report not conserved: %+v", r)
		}
		// Every kept byte is where the repeated line puts it.
		start := int64(0)
		if r.Keep == Tail {
			start = r.TotalBytes - r.KeptBytes
		}
		for k, b := range r.Kept {
			if b != line[(start+int64(k))%int64(len(line))] {
				t.Fatalf("report byte %d is %q: not the output's", start+int64(k), b)
			}
		}
		if finished {
			break
		}
	}
}
