package gate

// blockMasks classifies the 64 bytes of one block of a line: bit i of each mask stands
// for the block's byte i.
type blockMasks struct {
	quote     uint64 // '"'
	backslash uint64 // '\\'
	op        uint64 // one of { } [ ] : ,
	ws        uint64 // JSON whitespace: space, \t, \n, \r
	ctl       uint64 // a control byte, below 0x20 (\t, \n and \r too)
	high      uint64 // a byte >= 0x80
}

// classifyGo is classify in Go, a byte at a time: the reference the vector version is
// tested against, and the fallback where there is none. len(b) must be a multiple of
// 64; out must hold len(b)/64 entries.
func classifyGo(b []byte, out []blockMasks) {
	for k := range len(b) / 64 {
		var m blockMasks
		for i, c := range b[k*64 : k*64+64] {
			bit := uint64(1) << i
			switch c {
			case '"':
				m.quote |= bit
			case '\\':
				m.backslash |= bit
			case '{', '}', '[', ']', ':', ',':
				m.op |= bit
			case ' ', '\t', '\n', '\r':
				m.ws |= bit
			}
			if c < 0x20 {
				m.ctl |= bit
			}
			if c >= 0x80 {
				m.high |= bit
			}
		}
		out[k] = m
	}
}
