package gate

import "unsafe"

// Sizes of the id arena.
const (
	arenaBlock = 4 << 10 // bytes a block holds
	arenaMaxID = 128     // longer ids get a string of their own
)

// idArena turns accepted ids into strings without an allocation per id: it copies each
// id to the end of a shared block and returns a string over those bytes. A block is
// written only past its length, and a full block is dropped (never reused), so the bytes
// under a string handed out never change: each string is as immutable as one from
// string(b), and a handler may keep it as long as it likes. The cost is retention: a
// live id keeps its block (arenaBlock bytes) from being collected.
type idArena struct {
	block []byte
}

// string returns b as a string that stays valid and unchanged forever.
func (a *idArena) string(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > arenaMaxID {
		return string(b)
	}
	if cap(a.block)-len(a.block) < len(b) {
		a.block = make([]byte, 0, arenaBlock)
	}
	n := len(a.block)
	a.block = append(a.block, b...)
	return unsafe.String(&a.block[n], len(b))
}
