package output

import (
	"bytes"
	"unicode/utf8"
)

// The window rule. A text is a sequence of lines; a line is its bytes up to and including
// its '\n', and the text's last line may lack the '\n' (it ends where the text ends).
//
//   - Head: the longest run of whole lines from the start that holds at most Lines lines
//     and at most Bytes bytes. If not even the first line fits, the first line cut: its
//     first Bytes bytes, moved back to a UTF-8 character boundary.
//   - Tail: the same from the end; if the last line alone does not fit, its last Bytes
//     bytes, moved forward to a character boundary.
//
// A position i is a character boundary when it is 0, the end of the text, or text[i] is
// not a UTF-8 continuation byte. A cut moves at most utf8.UTFMax-1 bytes to find one
// (never splitting a valid character) and stays put in invalid UTF-8 that has none.
//
// Both windows depend only on the first (head) or last (tail) Bytes+1 bytes of the text,
// which is what lets a streaming Bounder store no more than that.

// span is a window [lo, hi) of a text, and whether it is made of whole lines (false: a
// cut line).
type span struct {
	lo, hi int
	whole  bool
}

// headWindow returns the head window of a text of which buf is a prefix; complete says
// buf is the whole text. buf must hold at least min(len(text), l.Bytes+1) bytes.
func headWindow(buf []byte, complete bool, l Limits) span {
	pos, lines := 0, int64(0)
	for lines < l.Lines && pos < len(buf) {
		var end int
		if i := bytes.IndexByte(buf[pos:], '\n'); i >= 0 {
			end = pos + i + 1
		} else if complete {
			end = len(buf)
		} else {
			break
		}
		if int64(end) > l.Bytes {
			break
		}
		pos = end
		lines++
	}
	if lines > 0 || len(buf) == 0 {
		return span{0, pos, true}
	}
	return span{0, cutBack(buf, l.Bytes), false}
}

// tailWindow returns the tail window of a text of which buf is a suffix; start says buf
// begins where the text begins. buf must hold at least min(len(text), l.Bytes+1) bytes.
func tailWindow(buf []byte, start bool, l Limits) span {
	pos, lines := len(buf), int64(0)
	for lines < l.Lines && pos > 0 {
		var begin int
		if i := bytes.LastIndexByte(buf[:pos-1], '\n'); i >= 0 {
			begin = i + 1
		} else if start {
			begin = 0
		} else {
			break
		}
		if int64(len(buf)-begin) > l.Bytes {
			break
		}
		pos = begin
		lines++
	}
	if lines > 0 || len(buf) == 0 {
		return span{pos, len(buf), true}
	}
	return span{cutForward(buf, int64(len(buf))-l.Bytes), len(buf), false}
}

// fillWindow sets r's window under l, and its Keep, from buf: the text's first (Head) or
// last (Tail) bytes, at least min(len(text), l.Bytes+1) of them; all says buf is the
// whole text.
func (r *Result) fillWindow(buf []byte, all bool, l Limits) {
	r.Keep = l.Keep
	var s span
	if l.Keep == Head {
		s = headWindow(buf, all, l)
	} else {
		s = tailWindow(buf, all, l)
	}
	r.fill(buf[s.lo:s.hi], s.whole)
}

// isBoundary reports whether i is a character boundary of buf.
func isBoundary(buf []byte, i int) bool {
	return i <= 0 || i >= len(buf) || utf8.RuneStart(buf[i])
}

// cutBack returns the largest character boundary at or before n, looking back at most
// utf8.UTFMax-1 bytes; n itself when there is none.
func cutBack(buf []byte, n int64) int {
	if n >= int64(len(buf)) {
		return len(buf)
	}
	c := int(max(n, 0))
	for i := c; i >= 0 && i > c-utf8.UTFMax; i-- {
		if isBoundary(buf, i) {
			return i
		}
	}
	return c
}

// cutForward returns the smallest character boundary at or after n, looking ahead at
// most utf8.UTFMax-1 bytes; n itself when there is none.
func cutForward(buf []byte, n int64) int {
	if n <= 0 {
		return 0
	}
	if n > int64(len(buf)) {
		return len(buf)
	}
	c := int(n)
	for i := c; i <= len(buf) && i < c+utf8.UTFMax; i++ {
		if isBoundary(buf, i) {
			return i
		}
	}
	return c
}

// countLines returns the number of lines in text: its '\n' bytes, plus one for a last line
// without '\n'.
func countLines(text []byte) int64 {
	n := int64(bytes.Count(text, []byte{'\n'}))
	if len(text) > 0 && text[len(text)-1] != '\n' {
		n++
	}
	return n
}

// Bound bounds a whole text at once: the window t keeps and the counts, with no artifact.
// It is the specification the streaming Bounder meets chunk by chunk. Bound reads only
// the part of text the window can come from (plus one pass to count lines), and copies
// only the kept bytes. It returns an ErrInvalidLimits error for an invalid t.
func Bound(text []byte, t Truncation) (Result, error) {
	if err := t.Validate(); err != nil {
		return Result{}, err
	}
	total := int64(len(text))
	lines := countLines(text)
	r := Result{Off: t.IsOff(), TotalBytes: total, TotalLines: lines}
	if t.IsOff() {
		r.Kept = bytes.Clone(text)
		r.KeptBytes, r.KeptLines = total, lines
		return r, nil
	}
	l := t.Limits()
	view := min(total, l.Bytes+1)
	buf := text[:view]
	if l.Keep == Tail {
		buf = text[total-view:]
	}
	r.fillWindow(buf, view == total, l)
	return r, nil
}
