package gate

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// TestIDSetEqualsNewestN: against a plain list of accepted ids, the set finds exactly
// the newest size ids, through wrap-around, evictions and backward shifts (tiny tables,
// so probe runs collide and wrap).
func TestIDSetEqualsNewestN(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		size := rapid.IntRange(1, 8).Draw(t, "size")
		s := newIDSet(size)
		var accepted []string
		ops := rapid.SliceOfN(rapid.IntRange(0, 3*size), 1, 300).Draw(t, "ids")
		for _, k := range ops {
			id := fmt.Sprint(k)
			want := false
			for _, a := range accepted[max(0, len(accepted)-size):] {
				want = want || a == id
			}
			h, got := s.lookup([]byte(id))
			if got != want {
				t.Fatalf("lookup(%q) = %v, want %v (newest %v)", id, got, want, accepted[max(0, len(accepted)-size):])
			}
			if !got {
				if got := s.add([]byte(id), h); got != id {
					t.Fatalf("add(%q) returned %q", id, got)
				}
				accepted = append(accepted, id)
			}
			// Every slot in use holds its ring entry's hash, and lies in the probe run
			// from that hash's home: no empty slot between.
			used := 0
			for i, sl := range s.slots {
				if sl == 0 {
					continue
				}
				used++
				e := s.ring[sl&s.idxMask-1]
				if e.h&^s.idxMask != sl&^s.idxMask {
					t.Fatalf("slot %d (%#x) and ring entry %+v disagree", i, sl, e)
				}
				for p := s.home(e.h); p != uint32(i); p = (p + 1) & s.mask {
					if s.slots[p] == 0 {
						t.Fatalf("slot %d is not reachable from its home %d", i, s.home(e.h))
					}
				}
			}
			if used != s.n {
				t.Fatalf("%d slots in use, %d ids held", used, s.n)
			}
		}
	})
}

// TestArenaStringsKeep: every string the arena hands out equals the bytes it was given,
// and still does after many more strings (and new blocks), whatever the source bytes
// do afterwards.
func TestArenaStringsKeep(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var a idArena
		var got, want []string
		for range rapid.IntRange(1, 400).Draw(t, "n") {
			b := []byte(rapid.StringN(0, arenaMaxID+20, -1).Draw(t, "id"))
			want = append(want, string(b))
			got = append(got, a.string(b))
			for i := range b {
				b[i] ^= 0xff // the caller's buffer is reused
			}
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("string %d is %q, was given %q", i, got[i], want[i])
			}
		}
	})
}
