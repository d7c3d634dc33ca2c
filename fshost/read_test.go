package fshost

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"
)

func TestRead(t *testing.T) {
	e := newEnv(t, Options{ReadMaxBytes: 20, ReadMaxLines: 3},
		"file w/clef a𝄞𝄞𝄞𝄞𝄞",
		"file w/five 1\n2\n3\n4\n5\n",
		"file w/nonl a\nb",
		"file w/empty",
		"file w/long 0123456789abcdefghijklmnopqrstuvwxyz\nnext\n",
		"file w/wide ααααααααααααααααααααα\n", // 2-byte runes over the 20-byte bound
		"file w/bytes 1234567890\n1234567890\n",
		"file w/d/in inner\n",
		"symlink w/link d/in",
		"file r/ro read only\n",
		"file w/nul a\x00b\n",
		"file w/bad ok\n\xff\xfe\n",
		"dir w/dir",
	)
	type want struct {
		content          string
		lines, total     int
		truncated        bool
		next             int
		absolute, reason string
	}
	cases := []struct {
		args string
		want want
	}{
		{`{"path": "five", "limit": 2}`, want{content: "1\n2\n", lines: 2, total: 5, absolute: "/work/five"}},
		{`{"path": "five"}`, want{content: "1\n2\n3\n", lines: 3, total: 5, truncated: true, next: 3, absolute: "/work/five"}},
		{`{"path": "five", "offset": 3}`, want{content: "4\n5\n", lines: 2, total: 5, absolute: "/work/five"}},
		{`{"path": "five", "offset": 4, "limit": 10}`, want{content: "5\n", lines: 1, total: 5, absolute: "/work/five"}},
		{`{"path": "five", "offset": 5}`, want{content: "", lines: 0, total: 5, absolute: "/work/five"}},
		{`{"path": "five", "offset": 99}`, want{content: "", lines: 0, total: 5, absolute: "/work/five"}},
		{`{"path": "nonl"}`, want{content: "a\nb", lines: 2, total: 2, absolute: "/work/nonl"}},
		{`{"path": "nonl", "offset": 1}`, want{content: "b", lines: 1, total: 2, absolute: "/work/nonl"}},
		{`{"path": "empty"}`, want{content: "", lines: 0, total: 0, absolute: "/work/empty"}},
		{`{"path": "long"}`, want{content: "0123456789abcdefghij", lines: 1, total: 2, truncated: true, next: 1, absolute: "/work/long"}},
		{`{"path": "wide"}`, want{content: strings.Repeat("α", 10), lines: 1, total: 1, truncated: true, next: 1, absolute: "/work/wide"}},
		{`{"path": "clef"}`, want{content: "a𝄞𝄞𝄞𝄞", lines: 1, total: 1, truncated: true, next: 1, absolute: "/work/clef"}}, // a rune across the bound
		{`{"path": "bytes"}`, want{content: "1234567890\n", lines: 1, total: 2, truncated: true, next: 1, absolute: "/work/bytes"}},
		{`{"path": "in", "cwd": "/work/d"}`, want{content: "inner\n", lines: 1, total: 1, absolute: "/work/d/in"}},
		{`{"path": "link"}`, want{content: "inner\n", lines: 1, total: 1, absolute: "/work/d/in"}},
		{`{"path": "/ro/ro"}`, want{content: "read only\n", lines: 1, total: 1, absolute: "/ro/ro"}},
		{`{"path": "nul"}`, want{reason: "binary"}},
		{`{"path": "bad"}`, want{reason: "binary"}},
		{`{"path": "dir"}`, want{reason: "invalid"}},
		{`{"path": "missing"}`, want{reason: "not_found"}},
		{`{"path": ""}`, want{reason: "invalid"}},
		{`{"path": "five", "offset": -1}`, want{reason: "invalid"}},
		{`{"path": "five", "limit": -1}`, want{reason: "invalid"}},
	}
	for _, c := range cases {
		var r ReadResult
		err := e.call(t, "fs.read", c.args, &r)
		if code(err) != c.want.reason {
			t.Errorf("fs.read %s: %v; want %q", c.args, err, c.want.reason)
			continue
		}
		if err != nil {
			continue
		}
		got := want{r.Content, r.Lines, r.TotalLines, r.Truncated, r.NextOffset, r.Absolute, ""}
		if got != c.want {
			t.Errorf("fs.read %s = %+v; want %+v", c.args, got, c.want)
		}
	}
}

// The window over any chunking of any text equals the window computed from the text's
// lines directly.
func TestWindowProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		text := rapid.StringOfN(rapid.SampledFrom([]rune{'a', 'b', '\n', 'é', '€', '𝄞'}), 0, 200, -1).Draw(rt, "text")
		data := []byte(text)
		offset := rapid.IntRange(0, 30).Draw(rt, "offset")
		limit := rapid.IntRange(1, 30).Draw(rt, "limit")
		maxBytes := rapid.IntRange(4, 80).Draw(rt, "maxBytes")
		w := window{offset: offset, limit: limit, maxBytes: maxBytes}
		if offset == 0 {
			w.state = collecting
		}
		var off int64
		for rest := data; len(rest) > 0; {
			n := rapid.IntRange(1, len(rest)).Draw(rt, "chunk")
			chunk := append([]byte(nil), rest[:n]...) // a fresh buffer, as scan's after aliasing
			w.utf8.write(chunk)
			w.feed(chunk, off)
			off += int64(n)
			rest = rest[n:]
		}
		w.finish()
		// The reference: split into lines, take the window, apply the byte bound.
		var lines []string
		for s := text; s != ""; {
			i := strings.IndexByte(s, '\n')
			if i < 0 {
				lines, s = append(lines, s), ""
			} else {
				lines, s = append(lines, s[:i+1]), s[i+1:]
			}
		}
		var content string
		n, cut := 0, false
		for i := offset; i < len(lines) && n < limit; i++ {
			if len(content)+len(lines[i]) > maxBytes {
				if n == 0 {
					content = cutUTF8(lines[i], maxBytes)
					n = 1
				}
				cut = true
				break
			}
			content += lines[i]
			n++
		}
		more := offset+n < len(lines)
		if got := w.content(); got != content || w.lines != n || w.total != len(lines) || w.cut != cut || (!cut && w.moreAfter != more) {
			rt.Fatalf("window(%q, off %d, lim %d, max %d) = %q lines %d total %d cut %v more %v; want %q %d %d %v %v",
				text, offset, limit, maxBytes, got, w.lines, w.total, w.cut, w.moreAfter, content, n, len(lines), cut, more)
		}
		if !w.utf8.valid() {
			rt.Fatalf("valid text %q reported invalid", text)
		}
	})
}

// utf8Stream over any chunking agrees with utf8.Valid on the whole.
func TestUTF8StreamProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		data := rapid.SliceOfN(rapid.SampledFrom([]byte{'a', 0x80, 0xbf, 0xc2, 0xe2, 0x82, 0xac, 0xf0, 0x9d, 0x84, 0x9e, 0xed, 0xa0, 0xff}), 0, 80).Draw(rt, "data")
		if rapid.Bool().Draw(rt, "ascii run") {
			data = append(bytes.Repeat([]byte("x"), 40), data...)
		}
		var u utf8Stream
		for rest := data; len(rest) > 0; {
			n := rapid.IntRange(1, len(rest)).Draw(rt, "chunk")
			u.write(rest[:n])
			rest = rest[n:]
		}
		if tail, ok := utf8Prefix(data); u.valid() != utf8.Valid(data) || (ok && tail == 0) != utf8.Valid(data) {
			rt.Fatalf("%x: stream %v, utf8Prefix %d %v, utf8.Valid %v", data, u.valid(), tail, ok, utf8.Valid(data))
		}
	})
}

// A file larger than one read buffer is read in chunks with the same result.
func TestReadLargeFile(t *testing.T) {
	e := newEnv(t, Options{ReadMaxBytes: -1, ReadMaxLines: -1})
	small := sizes{readWhole: 64 << 10, readChunk: 4093, grepWhole: 64 << 10, grepChunk: 4093}
	e.s.sizes = small
	var block bytes.Buffer
	for i := range 100 {
		block.WriteString("line ")
		block.WriteString(strings.Repeat("€", i%50)) // runes across chunk boundaries
		block.WriteString("\n")
	}
	var b bytes.Buffer
	b.Write(bytes.Repeat(block.Bytes(), (small.readWhole+small.readChunk/2)/block.Len()+1))
	must(t, os.WriteFile(e.work+"/big", b.Bytes(), 0o644))
	r, err := e.s.Read(context.Background(), ReadArgs{Path: "big", Offset: 3})
	must(t, err)
	lines := bytes.Count(b.Bytes(), []byte("\n"))
	idx := 0
	for range 3 {
		idx += bytes.IndexByte(b.Bytes()[idx:], '\n') + 1
	}
	if r.TotalLines != lines || r.Lines != lines-3 || r.Content != b.String()[idx:] || r.Truncated {
		t.Fatalf("big: total %d lines %d truncated %v content ok %v", r.TotalLines, r.Lines, r.Truncated, r.Content == b.String()[idx:])
	}
	// Bounded: the default window, and an invalid byte at the very end makes it binary.
	e.s = New(e.m, Options{ReadMaxBytes: 1000})
	e.s.sizes = small
	r, err = e.s.Read(context.Background(), ReadArgs{Path: "big"})
	must(t, err)
	if !r.Truncated || len(r.Content) > 1000 || r.TotalLines != lines {
		t.Fatalf("bounded big: truncated %v, %d bytes, %d lines", r.Truncated, len(r.Content), r.TotalLines)
	}
	f, err := os.OpenFile(e.work+"/big", os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	f.Write([]byte{0xff})
	f.Close()
	if _, err := e.s.Read(context.Background(), ReadArgs{Path: "big"}); code(err) != "binary" {
		t.Fatalf("big with a bad last byte: %v; want binary", err)
	}
}
