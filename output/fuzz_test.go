package output

import (
	"bytes"
	"errors"
	"testing"
	"unicode/utf8"
)

// FuzzBounder bounds arbitrary output, fed in chunks the input chooses, and checks the
// limits' laws and that the stream gives the whole text's window.
func FuzzBounder(f *testing.F) {
	f.Add([]byte("a\nb\nc\n"), uint16(3), uint8(1), true, []byte{1, 2})
	f.Add([]byte("aé€𝄞\nxyz"), uint16(4), uint8(2), false, []byte{3})
	f.Add([]byte("\x80\x80\x80\x80\x80\xff\n\n"), uint16(2), uint8(1), true, []byte{0, 7})
	f.Add(bytes.Repeat([]byte("line\n"), 100), uint16(64), uint8(10), false, []byte{200, 1, 5})
	f.Fuzz(func(t *testing.T, text []byte, nbytes uint16, nlines uint8, head bool, cuts []byte) {
		keep := Tail
		if head {
			keep = Head
		}
		tr := On(Limits{Bytes: int64(nbytes%512) + 1, Lines: int64(nlines%16) + 1, Keep: keep})
		l := tr.Limits()
		b, err := NewBounder(tr, BounderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rest := text
		for i := 0; len(rest) > 0; i++ {
			n := len(rest)
			if i < len(cuts) {
				n = min(n, int(cuts[i])+1)
			}
			b.Write(rest[:n])
			rest = rest[n:]
			if int64(len(b.buf)) > 2*(l.Bytes+1) {
				t.Fatalf("stores %d bytes for a cap of %d", len(b.buf), l.Bytes)
			}
		}
		got := b.Result()
		want, err := Bound(text, tr)
		if err != nil {
			t.Fatal(err)
		}
		if !sameWindow(got, want) {
			t.Fatalf("stream %q, whole %q", got.Kept, want.Kept)
		}
		if got.KeptBytes+got.DroppedBytes != int64(len(text)) || got.KeptLines+got.DroppedLines != got.TotalLines {
			t.Fatalf("not conserved: %+v", got)
		}
		if got.KeptBytes > l.Bytes || countLines(got.Kept) > l.Lines {
			t.Fatalf("over the cap: %+v", got)
		}
		if int64(len(text)) <= l.Bytes && countLines(text) <= l.Lines && got.Truncated() {
			t.Fatalf("output that fits was truncated")
		}
		if utf8.Valid(text) && !utf8.Valid(got.Kept) {
			t.Fatalf("split a character: %q", got.Kept)
		}
	})
}

// FuzzCapturePages writes and reads a capture with tiny caps as the input directs and
// checks every page against the bytes written and the retention model.
func FuzzCapturePages(f *testing.F) {
	f.Add([]byte("hello world, this is output"), []byte{5, 0, 3, 200, 7, 9, 1})
	f.Add(bytes.Repeat([]byte{0xff, '\n'}, 50), []byte{30, 30, 30, 0, 1, 40, 255})
	f.Fuzz(func(t *testing.T, data []byte, ops []byte) {
		m := model{prefix: 8, tail: 4, spill: 20}
		c, err := NewCapture(CaptureOptions{SpillDir: privateTempDir(t), PrefixBytes: m.prefix, TailBytes: m.tail, SpillLimit: m.spill})
		if err != nil {
			t.Fatal(err)
		}
		var written []byte
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i], int64(ops[i+1])
			switch op % 4 {
			case 0: // write arg%16 bytes of data
				n := min(int(arg%16), len(data))
				c.Write(data[:n])
				written = append(written, data[:n]...)
				data = data[n:]
			case 1, 2, 3: // read at offset arg/8, limit arg%16 (3: a limit over MaxPage)
				off, limit := arg/8, arg%16
				if op%4 == 3 {
					limit = MaxPage + 1
				}
				seen := int64(len(written))
				page, err := c.ReadPage(off, limit)
				retained, tailFrom := m.readable(seen, true)
				end := min(off+limit, seen)
				switch {
				case limit > MaxPage:
					if !errors.Is(err, ErrPageTooLarge) {
						t.Fatalf("too large: %v", err)
					}
				case off > seen:
					if err != nil || !page.More {
						t.Fatalf("past the end: %+v %v", page, err)
					}
				case end <= retained || off >= tailFrom || retained >= tailFrom:
					if err != nil || !bytes.Equal(page.Data, written[off:end]) {
						t.Fatalf("ReadPage(%d,%d) = %q, %v; want %q", off, limit, page.Data, err, written[off:end])
					}
				default:
					if !errors.Is(err, ErrLost) {
						t.Fatalf("ReadPage(%d,%d) = %v, want ErrLost", off, limit, err)
					}
				}
			}
		}
		if st := c.Stat(); st.Seen != int64(len(written)) {
			t.Fatalf("seen %d, wrote %d", st.Seen, len(written))
		}
	})
}
