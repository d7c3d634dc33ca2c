package gate

import "hash/maphash"

// idSet remembers the newest accepted host-request ids: a ring of fixed size keeps their
// order, and an open-addressing hash table (linear probing, backward-shift deletion)
// finds them, so a lookup hashes the id once and does not allocate. Insertion copies the
// id into an arena (idArena), which allocates a block now and then, not a string per id.
// An id leaves both when the ring wraps onto it; it may then be accepted again. Every id
// in the ring is distinct, since an id in the set is never accepted.
type idSet struct {
	arena idArena      // the ids' bytes
	seed  maphash.Seed // per gate, so a kernel cannot aim ids at one probe chain
	slots []idSlot     // a power of two, at least twice the ring
	mask  uint64
	ring  []idEntry
	next  int // ring index the next id takes
	n     int // ids held
}

type idSlot struct {
	h    uint64
	ring int32 // ring index + 1; 0: empty
}

type idEntry struct {
	id   string
	h    uint64
	slot int32
}

func newIDSet(size int) *idSet {
	n := 2
	for n < 2*size {
		n *= 2
	}
	return &idSet{seed: maphash.MakeSeed(), slots: make([]idSlot, n), mask: uint64(n - 1), ring: make([]idEntry, size)}
}

// lookup hashes id and reports whether it is among the ids held. It does not allocate.
func (s *idSet) lookup(id []byte) (h uint64, found bool) {
	h = maphash.Bytes(s.seed, id)
	for p := h & s.mask; ; p = (p + 1) & s.mask {
		sl := s.slots[p]
		if sl.ring == 0 {
			return h, false
		}
		if sl.h == h && s.ring[sl.ring-1].id == string(id) {
			return h, true
		}
	}
}

// add records id (absent, with hash h from lookup) as the newest, forgetting the oldest
// when the ring is full, and returns id as a string that stays valid forever. It
// allocates only when the arena needs a new block.
func (s *idSet) add(b []byte, h uint64) string {
	id := s.arena.string(b)
	if s.n == len(s.ring) {
		s.remove(int(s.ring[s.next].slot))
	} else {
		s.n++
	}
	p := h & s.mask
	for s.slots[p].ring != 0 {
		p = (p + 1) & s.mask
	}
	s.slots[p] = idSlot{h: h, ring: int32(s.next + 1)}
	s.ring[s.next] = idEntry{id: id, h: h, slot: int32(p)}
	if s.next++; s.next == len(s.ring) {
		s.next = 0
	}
	return id
}

// remove empties slot i and shifts later entries of its probe run back into the hole.
func (s *idSet) remove(i int) {
	mask := int(s.mask)
	for j := (i + 1) & mask; s.slots[j].ring != 0; j = (j + 1) & mask {
		home := int(s.slots[j].h & s.mask)
		// The entry at j may move to i unless its home lies cyclically in (i, j].
		if i <= j && i < home && home <= j || i > j && (i < home || home <= j) {
			continue
		}
		s.slots[i] = s.slots[j]
		s.ring[s.slots[i].ring-1].slot = int32(i)
		i = j
	}
	s.slots[i] = idSlot{}
}
