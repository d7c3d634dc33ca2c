package protocol

import "unicode"

// unicodeAllTable is a range table of every code point, surrogates excluded, so rapid
// draws far from ASCII too.
func unicodeAllTable() unicode.RangeTable {
	return unicode.RangeTable{R16: []unicode.Range16{{Lo: 0, Hi: 0xd7ff, Stride: 1}, {Lo: 0xe000, Hi: 0xffff, Stride: 1}},
		R32: []unicode.Range32{{Lo: 0x10000, Hi: 0x10ffff, Stride: 1}}}
}
