package gate

import (
	"bytes"
	"math/bits"
	"unicode/utf8"
)

// smallLine is the longest line the structural scan takes. Longer lines spend their
// time in long strings, which check's string skipping crosses faster.
const smallLine = 2048

const smallBlocks = smallLine / 64

// scanState holds the structural scan's per-line tables, kept in the validator so a
// scan allocates nothing.
type scanState struct {
	blocks  [smallBlocks]blockMasks
	quotes  [smallBlocks]uint64 // quotes that open or close a string (not escaped)
	structs [smallBlocks]uint64 // where the tokens start (see tokens)
	tail    [64]byte            // the last block, when b's capacity ends before it
}

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

	ok, anyEsc, high := s.tokens(b, nb)
	if !ok {
		return false
	}

	v.n = 0
	if !v.walk(b, nb, anyEsc) {
		return false
	}
	return !high || utf8.Valid(b)
}

// tokens is the scan's second stage: from the classified blocks of b it finds the
// strings and, per block, where tokens start (s.structs) and the quotes (s.quotes). It
// reports false when b cannot be valid: a bad escape, a control byte in a string, or a
// string left open. anyEsc reports a backslash; high a byte >= 0x80.
func (s *scanState) tokens(b []byte, nb int) (ok, anyEsc, high bool) {
	n := len(b)
	var inC, escC, scC, hi uint64
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
		hi |= m.high
		q := m.quote
		if m.backslash|escC != 0 {
			anyEsc = true
			esc := escapedBits(m.backslash, &escC)
			q &^= esc
			for e := esc; e != 0; e &= e - 1 {
				p := k<<6 | bits.TrailingZeros64(e)
				if p >= n {
					return false, anyEsc, false
				}
				if c := b[p]; !simpleEscape[c] && (c != 'u' || n-p < 5 || hex4(b[p+1:p+5]) < 0) {
					return false, anyEsc, false
				}
			}
		}
		in := prefixXor(q) ^ inC // inside a string: from its opening quote to before its closing one
		inC = uint64(int64(in) >> 63)
		// A control byte in a string. (One outside that is not whitespace is a scalar
		// byte, which no scalar accepts.)
		if m.ctl&in != 0 {
			return false, anyEsc, false
		}
		sc := ^(m.ws | m.op | q | in) // scalar bytes (and stray ones)
		s.quotes[k] = q
		s.structs[k] = m.op&^in | q&in | sc&^(sc<<1|scC)
		scC = sc >> 63
	}
	// A string left open is an error. (A last byte that escapes the next is in one, or
	// is a scalar byte.)
	return inC == 0, anyEsc, hi != 0
}

// walk checks the grammar over the token starts of the line's nb blocks (tokens): one
// object, and within it each container well formed and closed by its own kind. Each
// label is a state, named by what may come next; v.obj is the stack of container kinds.
// At the top level it checks each key (topLevelKey) and records the first members.
func (v *validator) walk(b []byte, nb int, anyEsc bool) bool {
	it := tokenIter{structs: v.sc.structs[:nb], t: v.sc.structs[0]}
	var (
		p, depth int
		c        byte
		ok       bool
		inObj    bool // the innermost container is an object
	)
	v.topKeys = 0
	if p, ok = it.next(); !ok || b[p] != '{' {
		return false
	}
	v.obj[0] |= 1
	depth, inObj = 1, true

firstKey: // after '{': a key or '}'
	if p, ok = it.next(); !ok {
		return false
	}
	switch b[p] {
	case '"':
		goto key
	case '}':
		goto closed
	}
	return false

nextKey: // after ',' in an object: a key
	if p, ok = it.next(); !ok || b[p] != '"' {
		return false
	}

key: // a key opens at p; a ':' must follow
	if depth == 1 && !v.topLevelKey(b, p, it, anyEsc) {
		return false
	}
	if p, ok = it.next(); !ok || b[p] != ':' {
		return false
	}

value: // a value
	if p, ok = it.next(); !ok {
		return false
	}
firstValue: // a value at p
	switch c = b[p]; c {
	case '"':
		goto after
	case '{', '[':
		w, bit := depth>>6, uint64(1)<<(depth&63)
		depth++
		if inObj = c == '{'; inObj {
			v.obj[w] |= bit
			goto firstKey
		}
		v.obj[w] &^= bit
		// after '[': a value or ']'
		if p, ok = it.next(); !ok {
			return false
		}
		if b[p] == ']' {
			goto closed
		}
		goto firstValue
	case '}', ']', ':', ',':
		return false
	}
	if !scalar(b, p) {
		return false
	}

after: // after a value: ',' or the container's closer
	if p, ok = it.next(); !ok {
		return false
	}
	switch b[p] {
	case ',':
		if inObj {
			goto nextKey
		}
		goto value
	case '}':
		if inObj {
			goto closed
		}
	case ']':
		if !inObj {
			goto closed
		}
	}
	return false

closed: // the innermost container closed
	if depth--; depth == 0 {
		_, ok = it.next()
		return !ok
	}
	inObj = v.obj[(depth-1)>>6]&(1<<((depth-1)&63)) != 0
	goto after
}

// tokenIter yields the token starts of a line in order, from the masks of its blocks.
type tokenIter struct {
	structs []uint64
	k       int    // the block of t
	t       uint64 // the token starts of block k not yet yielded
}

func (it *tokenIter) next() (int, bool) {
	for it.t == 0 {
		if it.k++; it.k >= len(it.structs) {
			return 0, false
		}
		it.t = it.structs[it.k]
	}
	p := it.k<<6 | bits.TrailingZeros64(it.t)
	it.t &= it.t - 1
	return p, true
}

// topLevelKey checks the top-level key whose string opens at p (a decided-on key may
// come once) and records the member when it is among the first, with its value when
// that is a string. it is the walk's iterator, just past the key.
func (v *validator) topLevelKey(b []byte, p int, it tokenIter, anyEsc bool) bool {
	s := &v.sc
	e := s.closeQuote(p)
	esc := anyEsc && bytes.IndexByte(b[p+1:e], '\\') >= 0
	// Only an escaped key or one starting e, i or t can be a decided-on key.
	var key uint8
	if c := b[p+1]; esc || c == 'e' || c == 'i' || c == 't' {
		if key = topKey(b[p+1:e], esc); key != 0 {
			if v.topKeys&key != 0 {
				return false
			}
			v.topKeys |= key
		}
	}
	if v.n == len(v.members) {
		return true
	}
	m := &v.members[v.n]
	v.n++
	m.ks, m.ke, m.kesc, m.str, m.key = p+1, e, esc, false, key
	// The value's string, if it is one: two tokens on (after the ':'). A copy of the
	// walk's iterator looks ahead.
	if _, ok := it.next(); ok {
		if q, ok := it.next(); ok && b[q] == '"' {
			e := s.closeQuote(q)
			m.vs, m.ve, m.str = q+1, e, true
			m.vesc = anyEsc && bytes.IndexByte(b[q+1:e], '\\') >= 0
		}
	}
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
	e, ok := skipScalar(b, p)
	return ok && (e == len(b) || delim[b[e]])
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
