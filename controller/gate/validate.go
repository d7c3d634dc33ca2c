package gate

import "unicode/utf8"

// maxDepth is the deepest nesting the validator accepts, the same as encoding/json's: a
// line the host's decoders cannot read is not let through.
const maxDepth = 10000

// Validation results.
const (
	vOK        = iota
	vNotObject // the line is not one JSON object (or not JSON at all)
	vUTF8      // a string holds invalid UTF-8
	vDepth     // nested deeper than maxDepth
	vDupKey    // "event", "id" or "type" twice at the top level
)

// member is one of the first top-level members of a validated line: its key's body
// and, when the value is a string, the value's body (without quotes).
type member struct {
	ks, ke, vs, ve int
	kesc, vesc     bool
	str            bool  // the value is a string
	key            uint8 // the decided-on key the key names (keyEvent, keyID, keyType), or 0
}

// validator checks that a line is exactly one JSON object, in valid UTF-8, with the keys
// the gate decides on ("event", "id", "type") at most once each at the top level. It
// accepts what json.Valid accepts, given valid UTF-8 and an object at the top. On the way
// it records the first three top-level members, which the gate's head is made of. Its
// nesting stack is fixed, so a check allocates nothing.
type validator struct {
	obj     [maxDepth/64 + 1]uint64 // bit d: the container at depth d+1 is an object
	members [3]member
	n       int   // members recorded
	high    bool  // a string holds a byte >= 0x80: check the line's UTF-8
	topKeys uint8 // the decided-on keys seen at the top level (scan)
	sc      scanState
}

// ws skips JSON whitespace; most tokens have none before them, so test once inline.
func ws(b []byte, i int) int {
	if i < len(b) && b[i] <= ' ' {
		return skipWS(b, i)
	}
	return i
}

// object validates b (a line without its newline). A line of up to smallLine bytes is
// tried with the structural scan first, where vectors make it pay; any line it does not
// show valid, and every longer line, gets check.
func (v *validator) object(b []byte) int {
	if classifyFast && len(b) <= smallLine && v.scan(b) {
		return vOK
	}
	return v.check(b)
}

// check validates b token by token, skipping string bodies with strSkip: the verdict
// and the reason for every line, and the fast path for long ones.
func (v *validator) check(b []byte) int {
	var (
		i, depth, res int
		esc           bool
		topKeys       uint8
		c             byte
		m             *member
	)
	v.n, v.high = 0, false
	i = ws(b, 0)
	if i >= len(b) || b[i] != '{' {
		return vNotObject
	}
	depth = 1
	v.obj[0] = 1
	i = ws(b, i+1)
	if i < len(b) && b[i] == '}' {
		i++
		depth = 0
		goto after
	}

key: // at a key, whitespace skipped
	if i >= len(b) || b[i] != '"' {
		return vNotObject
	}
	m = nil
	if depth == 1 && v.n < len(v.members) {
		m = &v.members[v.n]
		v.n++
		m.ks, m.str, m.key = i+1, false, 0
	}
	{
		ks := i + 1
		if i, esc, res = v.skip(b, ks); res != strOK {
			return vNotObject
		}
		if depth == 1 {
			if k := topKey(b[ks:i-1], esc); k != 0 {
				if topKeys&k != 0 {
					return vDupKey
				}
				topKeys |= k
				if m != nil {
					m.key = k
				}
			}
		}
	}
	if m != nil {
		m.ke, m.kesc = i-1, esc
	}
	i = ws(b, i)
	if i >= len(b) || b[i] != ':' {
		return vNotObject
	}
	i = ws(b, i+1)

value: // at a value, whitespace skipped
	if i >= len(b) {
		return vNotObject
	}
	c = b[i]
	switch {
	case c == '"':
		vs := i + 1
		if i, esc, res = v.skip(b, vs); res != strOK {
			return vNotObject
		}
		if m != nil {
			m.vs, m.ve, m.vesc, m.str = vs, i-1, esc, true
		}
	case c == '{' || c == '[':
		if depth >= maxDepth {
			return vDepth
		}
		w, bit := depth>>6, uint64(1)<<(depth&63)
		depth++
		m = nil
		i = ws(b, i+1)
		if c == '{' {
			v.obj[w] |= bit
			if i < len(b) && b[i] == '}' {
				i++
				depth--
				goto after
			}
			goto key
		}
		v.obj[w] &^= bit
		if i < len(b) && b[i] == ']' {
			i++
			depth--
			goto after
		}
		goto value
	default:
		var ok bool
		if i, ok = skipScalar(b, i); !ok {
			return vNotObject
		}
	}

after: // after a value
	i = ws(b, i)
	if depth == 0 {
		if i != len(b) {
			return vNotObject
		}
		if v.high && !utf8.Valid(b) {
			return vUTF8
		}
		return vOK
	}
	if i >= len(b) {
		return vNotObject
	}
	m = nil
	c = b[i]
	if d := depth - 1; v.obj[d>>6]&(1<<(d&63)) != 0 { // in an object
		switch c {
		case ',':
			i = ws(b, i+1)
			goto key
		case '}':
			i++
			depth--
			goto after
		}
		return vNotObject
	}
	switch c {
	case ',':
		i = ws(b, i+1)
		goto value
	case ']':
		i++
		depth--
		goto after
	}
	return vNotObject
}

// skipScalar scans a number, true, false or null at b[i] and returns the index after it.
func skipScalar(b []byte, i int) (int, bool) {
	switch b[i] {
	case 't':
		return i + 4, lit(b, i, "true")
	case 'f':
		return i + 5, lit(b, i, "false")
	case 'n':
		return i + 4, lit(b, i, "null")
	}
	return skipNumber(b, i)
}

func lit(b []byte, i int, s string) bool {
	return len(b)-i >= len(s) && string(b[i:i+len(s)]) == s
}

// skipNumber scans a JSON number at i: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func skipNumber(b []byte, i int) (int, bool) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	if i >= len(b) {
		return i, false
	}
	switch c := b[i]; {
	case c == '0':
		i++
	case '1' <= c && c <= '9':
		i = digits(b, i+1)
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return i, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return i, false
		}
		i = j
	}
	return i, true
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// The top-level keys the gate decides on, as bits.
const (
	keyEvent uint8 = 1 << iota
	keyID
	keyType
)

// topKey says which decided-on key the raw (still escaped) key body names, or 0. A body
// longer than 30 bytes cannot name one: "event" written fully escaped is 30 bytes.
func topKey(body []byte, esc bool) uint8 {
	if len(body) > 30 {
		return 0
	}
	k := body
	if esc {
		var tmp [32]byte
		k = unescape(tmp[:0], body)
	}
	switch string(k) {
	case "event":
		return keyEvent
	case "id":
		return keyID
	case "type":
		return keyType
	}
	return 0
}
