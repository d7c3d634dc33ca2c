package fshost

import (
	"bytes"
	"unicode/utf8"
)

// binaryHead is how much of a file's start is searched for a NUL byte to call it binary.
const binaryHead = 8 << 10

// hasNUL reports whether b, the start of a file at offset off, has a NUL byte within the
// first binaryHead bytes of the file.
func hasNUL(b []byte, off int64) bool {
	if off >= binaryHead {
		return false
	}
	n := min(int64(len(b)), binaryHead-off)
	return bytes.IndexByte(b[:n], 0) >= 0
}

// utf8Prefix checks that b is valid UTF-8 except for an incomplete rune at its very end,
// and returns the length of that incomplete tail (0 to 3). ok is false on an invalid
// sequence.
func utf8Prefix(b []byte) (tail int, ok bool) {
	tail = len(b) - len(trimPartialRune(b))
	return tail, utf8.Valid(b[:len(b)-tail])
}

// utf8Stream validates a byte stream given in chunks.
type utf8Stream struct {
	carry [utf8.UTFMax]byte
	n     int // bytes in carry
	bad   bool
}

// write validates the next chunk.
func (s *utf8Stream) write(b []byte) {
	if s.bad {
		return
	}
	if s.n > 0 {
		var buf [2 * utf8.UTFMax]byte
		k := copy(buf[:], s.carry[:s.n])
		k += copy(buf[k:], b[:min(len(b), utf8.UTFMax)])
		r, size := utf8.DecodeRune(buf[:k])
		if r == utf8.RuneError && size == 1 {
			if utf8.FullRune(buf[:k]) {
				s.bad = true
				return
			}
			// Still incomplete: all of b belongs to the carried rune.
			s.n = copy(s.carry[:], buf[:k])
			return
		}
		b = b[size-s.n:]
		s.n = 0
	}
	tail, ok := utf8Prefix(b)
	if !ok {
		s.bad = true
		return
	}
	s.n = copy(s.carry[:], b[len(b)-tail:])
}

// valid reports whether the stream so far, ended here, is valid UTF-8.
func (s *utf8Stream) valid() bool { return !s.bad && s.n == 0 }

// cutUTF8 returns the longest prefix of s of at most n bytes that does not split a rune.
func cutUTF8[S string | []byte](s S, n int) S {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// trimPartialRune drops an incomplete rune from the end of b (a cut made by byte count).
func trimPartialRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}
