package gate

import (
	"math/bits"
	"testing"
)

var pline = []byte(`{"event": "host_request", "id": "h000000", "type": "fs.read", "cell": "c12", "args": {"path": "/work/src/kennel/controller/gate/run.go", "offset": 0, "limit": 2000}}`)

type blk struct{ q, bs, op, ws, ctl uint64 }

func classify(b []byte, out []blk) {
	for i, c := range b {
		k, m := i>>6, uint64(1)<<(i&63)
		switch {
		case c == '"':
			out[k].q |= m
		case c == '\\':
			out[k].bs |= m
		case c == '{' || c == '}' || c == '[' || c == ']' || c == ':' || c == ',':
			out[k].op |= m
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			out[k].ws |= m
		}
		if c < 0x20 {
			out[k].ctl |= m
		}
	}
}

func pprefixXor(x uint64) uint64 {
	x ^= x << 1
	x ^= x << 2
	x ^= x << 4
	x ^= x << 8
	x ^= x << 16
	x ^= x << 32
	return x
}

// walk: the structural walk over masks.
func walk(b []byte, bl []blk) bool {
	var inCarry, scCarry uint64
	const (
		sValue = iota
		sKeyOrClose
		sKey
		sColon
		sAfter
	)
	state := sValue
	depth := 0
	var stack [64]byte
	n := len(b)
	for k := range bl {
		m := &bl[k]
		valid := ^uint64(0)
		if rem := n - k*64; rem < 64 {
			valid = uint64(1)<<rem - 1
		}
		if m.bs != 0 {
			return false
		}
		in := pprefixXor(m.q) ^ inCarry
		inCarry = uint64(int64(in) >> 63)
		if m.ctl&(in|^m.ws)&valid != 0 {
			return false
		}
		sc := ^(m.ws | m.op | m.q | in) & valid
		starts := sc &^ (sc<<1 | scCarry)
		scCarry = sc >> 63
		s := (m.op &^ in) | (m.q & in) | starts
		for s != 0 {
			p := k<<6 + bits.TrailingZeros64(s)
			s &= s - 1
			c := b[p]
			switch state {
			case sValue:
				switch c {
				case '"':
					state = sAfter
				case '{':
					stack[depth] = '}'
					depth++
					state = sKeyOrClose
				case '[':
					stack[depth] = ']'
					depth++
					state = sValue // simplified
				default:
					// scalar
					state = sAfter
				}
			case sKeyOrClose, sKey:
				if c == '"' {
					state = sColon
				} else if c == '}' && state == sKeyOrClose {
					depth--
					state = sAfter
				} else {
					return false
				}
			case sColon:
				if c != ':' {
					return false
				}
				state = sValue
			case sAfter:
				if depth == 0 {
					return false
				}
				switch c {
				case ',':
					if stack[depth-1] == '}' {
						state = sKey
					} else {
						state = sValue
					}
				case '}', ']':
					if stack[depth-1] != c {
						return false
					}
					depth--
				default:
					return false
				}
			}
		}
	}
	return depth == 0 && state == sAfter
}

func TestWalk(t *testing.T) {
	bl := make([]blk, (len(pline)+63)/64)
	classify(pline, bl)
	if !walk(pline, bl) {
		t.Fatal("bad")
	}
}

func BenchmarkWalk(b *testing.B) {
	bl := make([]blk, (len(pline)+63)/64)
	classify(pline, bl)
	for b.Loop() {
		if !walk(pline, bl) {
			b.Fatal("bad")
		}
	}
}
