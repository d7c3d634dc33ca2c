// Package jsonstr decodes JSON string bodies of ASCII in one pass, exactly as
// encoding/json decodes them, for the hot paths of cell output: the host's stream frames
// (protocol.StreamDecoder) and the API client's stream events.
package jsonstr

import (
	"encoding/binary"
	"unicode/utf16"
	"unicode/utf8"
)

// UnquoteASCII decodes body, the inside of a JSON string literal, into *buf as
// encoding/json does. ok is false when body is not a whole JSON string body of ASCII
// (a raw control byte, quote or non-ASCII byte, a bad escape, a backslash at the end).
// clean is false when body held a lone surrogate escape (decoded to U+FFFD). The text
// aliases body when body holds no escape.
func UnquoteASCII(body []byte, buf *[]byte) (text []byte, clean, ok bool) {
	i := PlainRun(body)
	if i == len(body) {
		return body, true, true
	}
	out := (*buf)[:0]
	if cap(out) < len(body) {
		out = make([]byte, 0, len(body))
	}
	clean = true
	for {
		out = append(out, body[:i]...)
		body = body[i:]
		if len(body) == 0 {
			break
		}
		if body[0] != '\\' || len(body) < 2 {
			return nil, false, false // a raw quote, control or non-ASCII byte
		}
		switch c := body[1]; c {
		case '"', '\\', '/':
			out = append(out, c)
			body = body[2:]
		case 'b':
			out = append(out, '\b')
			body = body[2:]
		case 'f':
			out = append(out, '\f')
			body = body[2:]
		case 'n':
			out = append(out, '\n')
			body = body[2:]
		case 'r':
			out = append(out, '\r')
			body = body[2:]
		case 't':
			out = append(out, '\t')
			body = body[2:]
		case 'u':
			r, good := hex4(body[2:])
			if !good {
				return nil, false, false
			}
			body = body[6:]
			if utf16.IsSurrogate(r) {
				// encoding/json: a pair decodes to its rune; anything else is U+FFFD,
				// and the escape after it, if any, is decoded on its own.
				if len(body) >= 6 && body[0] == '\\' && body[1] == 'u' {
					if r2, good := hex4(body[2:]); good {
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							out = utf8.AppendRune(out, dec)
							body = body[6:]
							break
						}
					}
				}
				r = utf8.RuneError
				clean = false
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, false, false
		}
		i = PlainRun(body)
	}
	*buf = out
	return out, clean, true
}

// hex4 decodes the 4 hex digits b begins with.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// PlainRun returns the length of b's prefix that a JSON string body holds as is, in
// ASCII: no control byte, quote, backslash or byte past 0x7f. Eight bytes a step.
func PlainRun(b []byte) int {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	i := 0
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		q := w ^ (ones * '"')
		s := w ^ (ones * '\\')
		// A high bit: a byte past 0x7f, below 0x20, a quote or a backslash (each test
		// is exact for whether some byte matches; the byte loop finds which).
		if (w|(w-ones*0x20)|(q-ones)&^q|(s-ones)&^s)&highs != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			return i
		}
	}
	return i
}
