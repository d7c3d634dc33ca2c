package jobs

import (
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"
)

func TestPropTakeScalarsIsAPrefixOfRunes(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.String().Draw(t, "s")
		n := rapid.IntRange(-1, 40).Draw(t, "n")
		runes := []rune(s)
		want := string(runes[:max(0, min(n, len(runes)))])
		if got := TakeScalars(s, n); got != want {
			t.Fatalf("TakeScalars(%q, %d) = %q, want %q", s, n, got, want)
		}
	})
}

// TestTakeScalarsReadsOnlyThePrefix takes 4096 scalars of a 64 MiB command: it must not
// convert or copy the whole string.
func TestTakeScalarsReadsOnlyThePrefix(t *testing.T) {
	s := strings.Repeat("€", 64<<20/3)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got := TakeScalars(s, MaxCommand)
	runtime.ReadMemStats(&after)
	if utf8.RuneCountInString(got) != MaxCommand {
		t.Fatalf("kept %d scalars", utf8.RuneCountInString(got))
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<10 {
		t.Fatalf("allocated %d bytes to take %d scalars", alloc, MaxCommand)
	}
}

func FuzzTakeScalars(f *testing.F) {
	f.Add("hello", 3)
	f.Add("é€𝄞x", 2)
	f.Add("\xff\xfe\x80abc", 4)
	f.Fuzz(func(t *testing.T, s string, n int) {
		n %= 64
		got := TakeScalars(s, n)
		if !utf8.ValidString(got) || utf8.RuneCountInString(got) > max(n, 0) {
			t.Fatalf("TakeScalars(%q, %d) = %q", s, n, got)
		}
		if utf8.ValidString(s) && !strings.HasPrefix(s, got) {
			t.Fatalf("TakeScalars(%q, %d) = %q is not a prefix", s, n, got)
		}
		if n > 0 && len(s) > 0 && got == "" {
			t.Fatalf("TakeScalars(%q, %d) kept nothing", s, n)
		}
	})
}
