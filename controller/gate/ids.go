package gate

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
)

// idSet remembers the newest accepted host-request ids: a ring of fixed size keeps their
// order, and an open-addressing hash table (linear probing, backward-shift deletion)
// finds them. A table slot is one uint32: the high bits of the id's hash (which hold
// its home slot too) above the ring index of the id, so a lookup hashes the id once,
// compares ids only on a hash match, and a deletion shifts slots without touching the
// ring. The table has at least four slots per id, so probe runs stay short. A lookup
// does not allocate; insertion copies the id into an arena (idArena), which allocates
// a block now and then, not a string per id.
//
// An id leaves both when the ring wraps onto it; it may then be accepted again. Every
// id in the ring is distinct, since an id in the set is never accepted.
type idSet struct {
	arena   idArena
	key     [2]uint64    // per gate and secret, so a kernel cannot aim ids at one probe chain
	seed    maphash.Seed // the same, for long ids
	slots   []uint32     // 0: empty; else hash &^ idxMask | ring index + 1
	mask    uint32       // len(slots) - 1
	idxBits uint         // low bits of a slot holding ring index + 1
	idxMask uint32
	ring    []idEntry
	next    int // ring index the next id takes
	n       int // ids held
}

type idEntry struct {
	id string
	h  uint32
}

// newIDSet returns a set of the newest size ids; size must be below 1<<14, so that the
// ring index and the home slot fit in a slot's 32 bits.
func newIDSet(size int) *idSet {
	idxBits := uint(bits.Len(uint(size)))
	n := 4
	for n < 4*size {
		n *= 2
	}
	if idxBits+uint(bits.Len(uint(n-1))) > 32 {
		panic("gate: id set too large")
	}
	return &idSet{
		key: [2]uint64{rand.Uint64(), rand.Uint64()}, seed: maphash.MakeSeed(), slots: make([]uint32, n), mask: uint32(n - 1),
		idxBits: idxBits, idxMask: 1<<idxBits - 1, ring: make([]idEntry, size),
	}
}

func (s *idSet) home(h uint32) uint32 { return h >> s.idxBits & s.mask }

// hash hashes an id with the set's secret key. An id of up to 16 bytes (the usual kind)
// is read as two words that hold every byte, which are mixed with the key and the
// length by a 64x64->128-bit multiply folded to 64 bits, twice (wyhash's mixing); a
// longer id goes to maphash.
func (s *idSet) hash(b []byte) uint32 {
	n := len(b)
	var x, y uint64
	switch {
	case n > 16:
		return uint32(maphash.Bytes(s.seed, b))
	case n >= 8:
		x, y = binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[n-8:])
	case n >= 4:
		x, y = uint64(binary.LittleEndian.Uint32(b)), uint64(binary.LittleEndian.Uint32(b[n-4:]))
	case n > 0:
		x = uint64(b[0])<<16 | uint64(b[n>>1])<<8 | uint64(b[n-1])
	}
	hi, lo := bits.Mul64(x^s.key[0], y^s.key[1]^uint64(n))
	hi, lo = bits.Mul64(hi^s.key[0], lo^s.key[1])
	return uint32(hi ^ lo)
}

// lookup hashes id and reports whether it is among the ids held. It does not allocate.
func (s *idSet) lookup(id []byte) (h uint32, found bool) {
	h = s.hash(id)
	tag := h &^ s.idxMask
	for p := s.home(h); ; p = (p + 1) & s.mask {
		sl := s.slots[p]
		if sl == 0 {
			return h, false
		}
		if sl&^s.idxMask == tag && s.ring[sl&s.idxMask-1].id == string(id) {
			return h, true
		}
	}
}

// add records id (absent, with hash h from lookup) as the newest, forgetting the oldest
// when the ring is full, and returns id as a string that stays valid forever. It
// allocates only when the arena needs a new block.
func (s *idSet) add(b []byte, h uint32) string {
	id := s.arena.string(b)
	if s.n == len(s.ring) {
		old := s.ring[s.next].h&^s.idxMask | uint32(s.next+1)
		p := s.home(old)
		for s.slots[p] != old {
			p = (p + 1) & s.mask
		}
		s.remove(p)
	} else {
		s.n++
	}
	p := s.home(h)
	for s.slots[p] != 0 {
		p = (p + 1) & s.mask
	}
	s.slots[p] = h&^s.idxMask | uint32(s.next+1)
	s.ring[s.next] = idEntry{id: id, h: h}
	if s.next++; s.next == len(s.ring) {
		s.next = 0
	}
	return id
}

// remove empties slot i and shifts later entries of its probe run back into the hole.
func (s *idSet) remove(i uint32) {
	for j := (i + 1) & s.mask; s.slots[j] != 0; j = (j + 1) & s.mask {
		// The entry at j may move to i unless its home lies cyclically in (i, j].
		if (j-s.home(s.slots[j]))&s.mask >= (j-i)&s.mask {
			s.slots[i] = s.slots[j]
			i = j
		}
	}
	s.slots[i] = 0
}
