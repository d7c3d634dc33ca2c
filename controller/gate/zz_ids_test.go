package gate

import (
	"hash/maphash"
	"fmt"
	"testing"
)

func BenchmarkTmpIDs(b *testing.B) {
	s := newIDSet(1024)
	ids := make([][]byte, 4096)
	for i := range ids {
		ids[i] = []byte(fmt.Sprintf("h%06d", i))
	}
	i := 0
	tcpu(b, func() {
		id := ids[i&4095]
		i++
		h, found := s.lookup(id)
		if !found {
			s.add(id, h)
		}
	})
}

func BenchmarkTmpMaphash(b *testing.B) {
	seed := maphash.MakeSeed()
	id := []byte("h000123")
	var x uint64
	tcpu(b, func() { x += maphash.Bytes(seed, id) })
	_ = x
}
