package gate

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// This file holds the byte-level JSON pieces the gate shares between its validator and
// its head scanner: whitespace, string bodies and escapes.

// isWS reports JSON whitespace.
func isWS(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func skipWS(b []byte, i int) int {
	for i < len(b) && isWS(b[i]) {
		i++
	}
	return i
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// specialMask flags, in the high bit of each byte, the bytes of x (little endian) that
// end a run of plain string body: '"', '\\', a control byte (< 0x20) or a non-ASCII byte
// (>= 0x80). A flag may be false only above the lowest true one, so the lowest set bit is
// exact: the classic SWAR zero-byte test, borrows travel only upwards.
func specialMask(x uint64) uint64 {
	return (x | runMask(x)) & msb
}

// runMask is specialMask without the non-ASCII bytes: for text known to be valid UTF-8.
func runMask(x uint64) uint64 {
	q := x ^ (lsb * '"')
	s := x ^ (lsb * '\\')
	return ((q-lsb)&^q | (s-lsb)&^s | (x-lsb*0x20)&^x) & msb
}

// plain reports the ASCII bytes that need no attention inside a JSON string body.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// strSkipGo is strSkip in Go, eight bytes a step.
func strSkipGo(b []byte) (n int, esc, high bool) {
	var acc uint64
	i := 0
	for {
		for ; len(b)-i >= 8; i += 8 {
			x := binary.LittleEndian.Uint64(b[i:])
			acc |= x
			if m := runMask(x); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
		}
		for ; i < len(b); i++ {
			c := b[i]
			if c == '"' || c == '\\' || c < 0x20 {
				break
			}
			acc |= uint64(c)
		}
		if i+1 < len(b) && b[i] == '\\' {
			if simpleEscape[b[i+1]] {
				esc = true
				i += 2
				continue
			}
			if b[i+1] == 'u' && len(b)-i >= 6 && hex4(b[i+2:i+6]) >= 0 {
				esc = true
				i += 6
				continue
			}
		}
		return i, esc, acc&msb != 0
	}
}

// simpleEscape marks the characters of a two-byte escape.
var simpleEscape = [256]bool{'"': true, '\\': true, '/': true, 'b': true, 'f': true, 'n': true, 'r': true, 't': true}

// skip is skipString for the validator. It does not check UTF-8: it notes in v.high
// whether the body holds a byte >= 0x80, and the validator checks the line's UTF-8 once
// at the end if any string did. A body that ends within its first eight bytes (most keys
// and short values) is found inline; the rest goes to strSkip, which also steps over
// valid escapes, so only a bad escape comes back here.
func (v *validator) skip(b []byte, i int) (next int, esc bool, res int) {
	if len(b)-i >= 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		if m := runMask(x); m != 0 {
			v.high = v.high || x&msb != 0 // conservative: bytes past the end too
			i += bits.TrailingZeros64(m) >> 3
			if b[i] == '"' {
				return i + 1, false, strOK
			}
		}
	}
	for {
		n, e, high := strSkip(b[i:])
		i += n
		esc = esc || e
		v.high = v.high || high
		if i >= len(b) {
			return i, esc, strIncomplete
		}
		switch b[i] {
		case '"':
			return i + 1, esc, strOK
		case '\\':
			esc = true
			var ok bool
			if i, ok = skipEscape(b, i); !ok {
				return i, esc, strSyntax
			}
		default: // a control byte
			return i, esc, strSyntax
		}
	}
}

// skipEscape checks the escape at b[i] == '\\' and returns the index after it.
func skipEscape(b []byte, i int) (int, bool) {
	switch {
	case i+1 >= len(b):
		return i, false
	case simpleEscape[b[i+1]]:
		return i + 2, true
	case b[i+1] == 'u' && len(b)-i >= 6 && hex4(b[i+2:i+6]) >= 0:
		return i + 6, true
	}
	return i, false
}

// scan results shared by the string scanners.
const (
	strOK         = iota
	strIncomplete // the input ended inside the string
	strSyntax     // a control byte or a bad escape
	strUTF8       // invalid UTF-8 inside the string
)

// skipString scans a string body starting at i (just after the opening quote) and
// returns the index just after the closing quote. It checks escapes, control bytes and
// UTF-8 (as utf8.Valid does). esc reports whether the body held a backslash. Plain runs
// are skipped sixteen bytes a step (specialMask); the rest is handled inline.
func skipString(b []byte, i int) (next int, esc bool, res int) {
	for {
		for len(b)-i >= 16 {
			mx := specialMask(binary.LittleEndian.Uint64(b[i:]))
			my := specialMask(binary.LittleEndian.Uint64(b[i+8:]))
			if mx != 0 {
				i += bits.TrailingZeros64(mx) >> 3
				break
			}
			if my != 0 {
				i += 8 + bits.TrailingZeros64(my)>>3
				break
			}
			i += 16
		}
		for i < len(b) && plain[b[i]] {
			i++
		}
		if i >= len(b) {
			return i, esc, strIncomplete
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, esc, strOK
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				return i, esc, strIncomplete
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(b)-i < 6 {
					if !hexPrefix(b[i+2:]) {
						return i, esc, strSyntax
					}
					return i, esc, strIncomplete
				}
				if hex4(b[i+2:i+6]) < 0 {
					return i, esc, strSyntax
				}
				i += 6
			default:
				return i, esc, strSyntax
			}
		case c < 0x20:
			return i, esc, strSyntax
		default: // c >= 0x80
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size <= 1 {
				if !utf8.FullRune(b[i:]) {
					return i, esc, strIncomplete
				}
				return i, esc, strUTF8
			}
			i += size
		}
	}
}

// hexPrefix reports whether every byte of b (a cut \u escape) is a hex digit.
func hexPrefix(b []byte) bool {
	for _, c := range b {
		if unhex(c) < 0 {
			return false
		}
	}
	return true
}

func unhex(c byte) rune {
	switch {
	case '0' <= c && c <= '9':
		return rune(c - '0')
	case 'a' <= c && c <= 'f':
		return rune(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return rune(c - 'A' + 10)
	}
	return -1
}

// hex4 decodes four hex digits, or returns -1.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		d := unhex(c)
		if d < 0 {
			return -1
		}
		r = r<<4 | d
	}
	return r
}

// unescape appends the decoded form of a string body that skipString accepted (no
// quotes) to dst. It decodes exactly as encoding/json does: a \u surrogate pair becomes
// one rune, a lone surrogate becomes U+FFFD.
func unescape(dst, body []byte) []byte {
	for i := 0; i < len(body); {
		c := body[i]
		if c != '\\' {
			j := i + 1
			for j < len(body) && body[j] != '\\' {
				j++
			}
			dst = append(dst, body[i:j]...)
			i = j
			continue
		}
		switch e := body[i+1]; e {
		case 'u':
			r := hex4(body[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				if i+6 <= len(body) && body[i] == '\\' && body[i+1] == 'u' {
					if r2 := hex4(body[i+2:]); r2 >= 0 {
						if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
							dst = utf8.AppendRune(dst, d)
							i += 6
							continue
						}
					}
				}
				r = utf8.RuneError
			}
			dst = utf8.AppendRune(dst, r)
		default:
			dst = append(dst, unescapeByte[e])
			i += 2
		}
	}
	return dst
}

var unescapeByte = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}
