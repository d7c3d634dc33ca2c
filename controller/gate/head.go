package gate

// head is what the gate reads from the first HeadSize bytes of a line: the frame's
// event and id (the first two keys, both strings) and, for a host request, its type (the
// third key, when it is "type" with a string value). The byte slices point into the line
// or into the scanner's scratch space; they are valid until the next scan.
type head struct {
	event, id, typ []byte
	ok             bool   // event and id were read
	hasType        bool   // typ was read
	why            string // why not ok
}

// Reasons a head is unreadable.
const (
	whyNoEvent = "no \"event\" string as the line's first key"
	whyNoID    = "no \"id\" string as the line's second key"
)

// headScanner decodes head strings that hold escapes into scratch space it keeps, so a
// scan allocates only when an escaped string is longer than any before.
type headScanner struct {
	scratch [3][]byte // event, id, type; keys use a stack buffer
}

// scan reads the head h. It never looks past h: a string cut by the end of h is absent.
func (s *headScanner) scan(h []byte) (hd head) {
	i := skipWS(h, 0)
	if i >= len(h) || h[i] != '{' {
		hd.why = whyNoEvent
		return hd
	}
	var ok bool
	if i, ok = s.member(h, i+1, "event", 0, &hd.event); !ok {
		hd.why = whyNoEvent
		return hd
	}
	if i = skipWS(h, i); i >= len(h) || h[i] != ',' {
		hd.why = whyNoID
		return hd
	}
	if i, ok = s.member(h, i+1, "id", 1, &hd.id); !ok {
		hd.why = whyNoID
		return hd
	}
	hd.ok = true
	if string(hd.event) != eventHostRequest {
		return hd
	}
	if i = skipWS(h, i); i >= len(h) || h[i] != ',' {
		return hd
	}
	_, hd.hasType = s.member(h, i+1, "type", 2, &hd.typ)
	return hd
}

// member reads `"key" : "value"` at i (after optional whitespace) into *val, decoding
// escapes into scratch slot k. It fails when the key differs or the value is not a string
// complete and valid within h.
func (s *headScanner) member(h []byte, i int, key string, k int, val *[]byte) (int, bool) {
	i = skipWS(h, i)
	if i >= len(h) || h[i] != '"' {
		return i, false
	}
	next, esc, res := skipString(h, i+1)
	if res != strOK {
		return i, false
	}
	body := h[i+1 : next-1]
	if esc {
		if len(body) > 6*len(key) {
			return i, false
		}
		var tmp [32]byte
		body = unescape(tmp[:0], body)
	}
	if string(body) != key {
		return i, false
	}
	i = skipWS(h, next)
	if i >= len(h) || h[i] != ':' {
		return i, false
	}
	i = skipWS(h, i+1)
	if i >= len(h) || h[i] != '"' {
		return i, false
	}
	next, esc, res = skipString(h, i+1)
	if res != strOK {
		return i, false
	}
	body = h[i+1 : next-1]
	if esc {
		s.scratch[k] = unescape(s.scratch[k][:0], body)
		body = s.scratch[k]
	}
	*val = body
	return next, true
}

// fromMembers reads the head of a line the validator accepted from the members it
// recorded, with the same rules as scan on line[:headSize]: each string it uses must
// close before headSize. The validator has said which decided-on key each member's key
// names (topKey decodes escapes as scan does).
func (s *headScanner) fromMembers(line []byte, ms []member, headSize int) (hd head) {
	var ok bool
	if hd.event, ok = s.memberValue(line, ms, 0, keyEvent, headSize); !ok {
		hd.why = whyNoEvent
		return hd
	}
	if hd.id, ok = s.memberValue(line, ms, 1, keyID, headSize); !ok {
		hd.why = whyNoID
		return hd
	}
	hd.ok = true
	if string(hd.event) == eventHostRequest {
		hd.typ, hd.hasType = s.memberValue(line, ms, 2, keyType, headSize)
	}
	return hd
}

func (s *headScanner) memberValue(line []byte, ms []member, k int, key uint8, headSize int) ([]byte, bool) {
	if k >= len(ms) {
		return nil, false
	}
	m := &ms[k]
	if m.key != key || !m.str || m.ve >= headSize {
		return nil, false
	}
	val := line[m.vs:m.ve]
	if m.vesc {
		s.scratch[k] = unescape(s.scratch[k][:0], val)
		val = s.scratch[k]
	}
	return val, true
}
