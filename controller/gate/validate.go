package gate

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

// validator checks that a line is exactly one JSON object, in valid UTF-8, with the keys
// the gate decides on ("event", "id", "type") at most once each at the top level. It
// accepts what json.Valid accepts, given valid UTF-8 and an object at the top.
// Its nesting stack is fixed, so a check allocates nothing.
type validator struct {
	obj [maxDepth/64 + 1]uint64 // bit d: the container at depth d+1 is an object
}

const (
	stObjFirst = iota // just after '{': a key or '}'
	stKey             // after ',' in an object: a key
	stArrFirst        // just after '[': a value or ']'
	stValue           // a value
	stAfter           // after a value: ',', a closer, or the end
)

// object validates b (a line without its newline).
func (v *validator) object(b []byte) int {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return vNotObject
	}
	i++
	depth := 1
	v.obj[0] = 1
	var topKeys uint8
	st := stObjFirst
	for {
		switch st {
		case stObjFirst, stKey:
			i = skipWS(b, i)
			if i >= len(b) {
				return vNotObject
			}
			if b[i] == '}' && st == stObjFirst {
				i++
				depth--
				st = stAfter
				continue
			}
			if b[i] != '"' {
				return vNotObject
			}
			ks := i + 1
			next, esc, res := skipString(b, ks)
			if res != strOK {
				return strResult(res)
			}
			if depth == 1 {
				if k := topKey(b[ks:next-1], esc); k != 0 {
					if topKeys&k != 0 {
						return vDupKey
					}
					topKeys |= k
				}
			}
			i = skipWS(b, next)
			if i >= len(b) || b[i] != ':' {
				return vNotObject
			}
			i++
			st = stValue
		case stArrFirst:
			i = skipWS(b, i)
			if i < len(b) && b[i] == ']' {
				i++
				depth--
				st = stAfter
				continue
			}
			st = stValue
		case stValue:
			i = skipWS(b, i)
			if i >= len(b) {
				return vNotObject
			}
			switch c := b[i]; c {
			case '{', '[':
				if depth >= maxDepth {
					return vDepth
				}
				w, bit := depth>>6, uint64(1)<<(depth&63)
				if c == '{' {
					v.obj[w] |= bit
					st = stObjFirst
				} else {
					v.obj[w] &^= bit
					st = stArrFirst
				}
				depth++
				i++
			case '"':
				next, _, res := skipString(b, i+1)
				if res != strOK {
					return strResult(res)
				}
				i = next
				st = stAfter
			case 't':
				if !lit(b, i, "true") {
					return vNotObject
				}
				i += 4
				st = stAfter
			case 'f':
				if !lit(b, i, "false") {
					return vNotObject
				}
				i += 5
				st = stAfter
			case 'n':
				if !lit(b, i, "null") {
					return vNotObject
				}
				i += 4
				st = stAfter
			default:
				next, ok := skipNumber(b, i)
				if !ok {
					return vNotObject
				}
				i = next
				st = stAfter
			}
		case stAfter:
			i = skipWS(b, i)
			if depth == 0 {
				if i != len(b) {
					return vNotObject
				}
				return vOK
			}
			if i >= len(b) {
				return vNotObject
			}
			d := depth - 1
			inObj := v.obj[d>>6]&(1<<(d&63)) != 0
			switch c := b[i]; {
			case c == ',':
				i++
				if inObj {
					st = stKey
				} else {
					st = stValue
				}
			case c == '}' && inObj, c == ']' && !inObj:
				i++
				depth--
			default:
				return vNotObject
			}
		}
	}
}

func strResult(res int) int {
	if res == strUTF8 {
		return vUTF8
	}
	return vNotObject
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
