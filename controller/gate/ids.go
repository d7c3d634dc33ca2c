package gate

// idRing remembers the newest accepted host-request ids: a ring of fixed size for their
// order and a set for lookup. An id leaves both when the ring wraps onto it; it may then
// be accepted again. Every id in the ring is distinct, since an id in the set is never
// accepted.
type idRing struct {
	ring []string
	next int // where the next id goes
	n    int // ids held
	set  map[string]struct{}
}

func newIDRing(size int) *idRing {
	return &idRing{ring: make([]string, size), set: make(map[string]struct{}, size)}
}

// has reports whether id is among the newest accepted ids. It does not allocate.
func (r *idRing) has(id []byte) bool {
	_, ok := r.set[string(id)]
	return ok
}

// add records id as the newest accepted id, forgetting the oldest when full.
func (r *idRing) add(id string) {
	if r.n == len(r.ring) {
		delete(r.set, r.ring[r.next])
	} else {
		r.n++
	}
	r.ring[r.next] = id
	r.set[id] = struct{}{}
	r.next++
	if r.next == len(r.ring) {
		r.next = 0
	}
}
