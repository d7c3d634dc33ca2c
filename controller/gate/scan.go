package gate

import (
	"bytes"
	"math/bits"
	"unicode/utf8"
)

// smallLine is the longest line the structural scan takes. Longer lines spend their
// time in long strings, which validator.object's string skipping crosses faster.
const smallLine = 2048

const smallBlocks = smallLine / 64

// scanState holds the structural scan's per-line tables, kept in the validator so a
// scan allocates nothing.
type scanState struct {
	blocks  [smallBlocks]blockMasks
	quotes  [smallBlocks]uint64 // quotes that open or close a string (not escaped)
	structs [smallBlocks]uint64 // where the tokens begin (see scan)
	tail    [64]byte            // the last block, when b's capacity ends before it
}

// States of the structural walk: what the next token may be.
const (
	stTop        = iota // the line's first token: '{'
	stFirstKey          // after '{': a key or '}'
	stKey               // after ',' in an object: a key
	stColon             // after a key: ':'
	stValue             // after ':', or after ',' in an array: a value
	stFirstValue        // after '[': a value or ']'
	stNext              // after a value: ',' or the container's closer
	stEnd               // after the top-level object: nothing
)

// scan is a fast validator for lines of up to smallLine bytes. It reports true when b
// is one valid JSON object in valid UTF-8 without a decided-on key twice at the top
// level, having recorded the members as object does; false means only "not shown
// valid": object's own check then gives the verdict (and the reason).
//
// It works as simdjson's first stages do. Each 64-byte block is classified with vector
// compares into bit masks (quotes, backslashes, operators, whitespace, control and
// non-ASCII bytes; classify). Bit arithmetic on the masks then finds escaped bytes (runs
// of backslashes), the quotes left, the bytes inside strings (a prefix XOR of the
// quotes), control bytes inside strings, and where each token begins: an operator, an
// opening quote, or the first byte of a run of scalar bytes (a number or a literal).
// Last, a walk over the token starts checks the grammar with a small state machine and
// a stack of container kinds; it never looks inside a string, and checks each scalar
// and each top-level key by its bytes. So a line costs a few operations per 64 bytes
// plus a few per token, whatever its strings hold.
//
// b is read up to the next multiple of 64 bytes within cap(b); what lies past len(b)
// is masked off.
func (v *validator) scan(b []byte) bool {
	n := len(b)
	nb := (n + 63) / 64
	if nb == 0 || nb > smallBlocks {
		return false
	}
	s := &v.sc
	if full := nb * 64; cap(b) >= full {
		classify(b[:full], s.blocks[:nb])
	} else {
		whole := n &^ 63
		classify(b[:whole], s.blocks[:whole/64])
		copy(s.tail[:], b[whole:])
		classify(s.tail[:], s.blocks[whole/64:nb])
	}

	// Stage two: strings and token starts, block by block.
	var inC, escC, scC, high uint64
	anyEsc := false
	for k := range nb {
		m := s.blocks[k]
		if k == nb-1 && n&63 != 0 {
			valid := uint64(1)<<(n&63) - 1
			m.quote &= valid
			m.backslash &= valid
			m.op &= valid
			m.ctl &= valid
			m.high &= valid
			m.ws |= ^valid // past the end: as if whitespace
		}
		high |= m.high
		q := m.quote
		if m.backslash|escC != 0 {
			anyEsc = true
			esc := escapedBits(m.backslash, &escC)
			q &^= esc
			for e := esc; e != 0; e &= e - 1 {
				p := k<<6 | bits.TrailingZeros64(e)
				if p >= n {
					return false
				}
				if c := b[p]; !simpleEscape[c] && (c != 'u' || n-p < 5 || hex4(b[p+1:p+5]) < 0) {
					return false
				}
			}
		}
		in := prefixXor(q) ^ inC // inside a string: from its opening quote to before its closing one
		inC = uint64(int64(in) >> 63)
		if m.ctl&(in|^m.ws) != 0 { // a control byte in a string, or one that is not whitespace
			return false
		}
		sc := ^(m.ws | m.op | q | in) // scalar bytes (and stray ones)
		s.structs[k] = m.op&^in | q&in | sc&^(sc<<1|scC)
		scC = sc >> 63
		s.quotes[k] = q
	}
	if inC != 0 || escC != 0 {
		return false
	}

	// Stage three: the grammar, token by token.
	var (
		st      = stTop
		depth   int
		topKeys uint8
		cur     *member // the top-level member whose value comes next, when recorded
	)
	v.n = 0
	for k := range nb {
		for t := s.structs[k]; t != 0; t &= t - 1 {
			p := k<<6 | bits.TrailingZeros64(t)
			c := b[p]
			switch st {
			case stColon:
				if c != ':' {
					return false
				}
				st = stValue
				continue
			case stKey, stFirstKey:
				if c == '"' {
					if depth == 1 {
						e := s.closeQuote(p)
						esc := anyEsc && bytes.IndexByte(b[p+1:e], '\\') >= 0
						if key := topKey(b[p+1:e], esc); key != 0 {
							if topKeys&key != 0 {
								return false
							}
							topKeys |= key
						}
						if v.n < len(v.members) {
							cur = &v.members[v.n]
							v.n++
							*cur = member{ks: p + 1, ke: e, kesc: esc}
						}
					}
					st = stColon
					continue
				}
				if c != '}' || st != stFirstKey {
					return false
				}
			case stNext:
				switch c {
				case ',':
					if d := depth - 1; v.obj[d>>6]&(1<<(d&63)) != 0 {
						st = stKey
					} else {
						st = stValue
					}
					continue
				case '}', ']':
					d := depth - 1
					if isObj := v.obj[d>>6]&(1<<(d&63)) != 0; isObj != (c == '}') {
						return false
					}
				default:
					return false
				}
			case stValue, stFirstValue, stTop:
				if cur != nil {
					if c == '"' {
						e := s.closeQuote(p)
						cur.vs, cur.ve, cur.str = p+1, e, true
						cur.vesc = anyEsc && bytes.IndexByte(b[p+1:e], '\\') >= 0
					}
					cur = nil
				}
				switch c {
				case '"':
					if st == stTop {
						return false
					}
					st = stNext
					continue
				case '{', '[':
					if st == stTop && c == '[' {
						return false
					}
					w, bit := depth>>6, uint64(1)<<(depth&63)
					if c == '{' {
						v.obj[w] |= bit
						st = stFirstKey
					} else {
						v.obj[w] &^= bit
						st = stFirstValue
					}
					depth++
					continue
				case ']':
					if st != stFirstValue {
						return false
					}
				case '}', ':', ',':
					return false
				default:
					if st == stTop || !scalar(b, p) {
						return false
					}
					st = stNext
					continue
				}
			default: // stEnd
				return false
			}
			// c closed the innermost container.
			if depth--; depth == 0 {
				st = stEnd
			} else {
				st = stNext
			}
		}
	}
	if st != stEnd {
		return false
	}
	if high != 0 && !utf8.Valid(b) {
		return false
	}
	v.high = high != 0
	return true
}

// closeQuote returns the index of the quote that closes the string opened at p. The
// caller knows there is one: every string in the line closes.
func (s *scanState) closeQuote(p int) int {
	k := p >> 6
	m := s.quotes[k] & (^uint64(1) << (p & 63))
	for m == 0 {
		k++
		m = s.quotes[k]
	}
	return k<<6 | bits.TrailingZeros64(m)
}

// scalar reports whether a number, true, false or null starts at b[p] and is followed
// by whitespace, an operator or the end of b.
func scalar(b []byte, p int) bool {
	var e int
	switch b[p] {
	case 't':
		if !lit(b, p, "true") {
			return false
		}
		e = p + 4
	case 'f':
		if !lit(b, p, "false") {
			return false
		}
		e = p + 5
	case 'n':
		if !lit(b, p, "null") {
			return false
		}
		e = p + 4
	default:
		var ok bool
		if e, ok = skipNumber(b, p); !ok {
			return false
		}
	}
	return e == len(b) || delim[b[e]]
}

// delim marks the bytes that may end a scalar: whitespace and operators.
var delim = [256]bool{' ': true, '\t': true, '\n': true, '\r': true, '{': true, '}': true, '[': true, ']': true, ':': true, ',': true}

// prefixXor returns the mask whose bit i is the XOR of x's bits 0..i: with x the quotes
// of a block, the bytes from each opening quote up to (not including) its closing one.
func prefixXor(x uint64) uint64 {
	x ^= x << 1
	x ^= x << 2
	x ^= x << 4
	x ^= x << 8
	x ^= x << 16
	x ^= x << 32
	return x
}

// escapedBits returns the bytes of a block escaped by a backslash, given the block's
// backslashes: in a run of backslashes every second one escapes the next byte. *carry
// is 1 when the previous block's last byte escapes this block's first, and is updated
// for the next block. (simdjson's find_escaped_branchless.)
func escapedBits(backslash uint64, carry *uint64) uint64 {
	const even = 0x5555555555555555
	backslash &^= *carry
	follows := backslash<<1 | *carry
	oddStarts := backslash &^ even &^ follows
	evenSeqs, c := bits.Add64(oddStarts, backslash, 0)
	*carry = c
	return (even ^ evenSeqs<<1) & follows
}
