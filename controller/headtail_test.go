package controller

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// headTail keeps exactly the first n and the last n bytes of everything written, in any
// split into writes, and counts every byte between them as dropped.
func TestHeadTailKeepsHeadAndTailAndCountsTheRest(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 64).Draw(t, "n")
		writes := rapid.SliceOfN(rapid.SliceOfN(rapid.Byte(), 0, 200), 0, 20).Draw(t, "writes")
		h := newHeadTail(n)
		var all []byte
		for _, w := range writes {
			if got, err := h.Write(w); got != len(w) || err != nil {
				t.Fatalf("Write(%d bytes) = %d, %v", len(w), got, err)
			}
			all = append(all, w...)
		}
		want := string(all)
		if len(all) > 2*n {
			head, tail := all[:n], all[len(all)-n:]
			want = fmt.Sprintf("%s\n[… %d bytes of stderr dropped …]\n%s", head, len(all)-2*n, tail)
		}
		if got := h.String(); got != want {
			t.Fatalf("n=%d, %d bytes written: got %q, want %q", n, len(all), got, want)
		}
	})
}
