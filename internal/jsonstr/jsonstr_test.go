package jsonstr

import (
	"encoding/json"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestPlainRunFindsTheFirstSpecialByte holds the eight-bytes-a-step scan to a byte loop
// on every position and kind of special byte.
func TestPlainRunFindsTheFirstSpecialByte(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.SliceOfN(rapid.SampledFrom([]byte{'a', ' ', '~', 0x1f, 0x20, '"', '\\', 0x7f, 0x80, 0xff, 0, '!', '#', '[', ']'}), 0, 40).Draw(t, "b")
		want := len(b)
		for i, c := range b {
			if c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
				want = i
				break
			}
		}
		if got := PlainRun(b); got != want {
			t.Fatalf("PlainRun(%q) = %d, want %d", b, got, want)
		}
	})
}

// checkAsEncodingJSON states UnquoteASCII's law on one body: it decodes exactly the
// ASCII bodies encoding/json decodes, to the same text, and says clean exactly when no
// lone surrogate became U+FFFD.
func checkAsEncodingJSON(t interface{ Fatalf(string, ...any) }, body []byte) {
	var buf []byte
	got, clean, ok := UnquoteASCII(body, &buf)
	var want string
	werr := json.Unmarshal(append(append([]byte{'"'}, body...), '"'), &want)
	ascii := true
	for _, c := range body {
		if c >= 0x80 {
			ascii = false
		}
	}
	switch {
	case ok && werr != nil:
		t.Fatalf("%q: UnquoteASCII took it, encoding/json refuses it: %v", body, werr)
	case ok && string(got) != want:
		t.Fatalf("%q: UnquoteASCII %q, encoding/json %q", body, got, want)
	case !ok && werr == nil && ascii:
		t.Fatalf("%q: UnquoteASCII refused ASCII encoding/json takes (%q)", body, want)
	case ok && clean && strings.Contains(string(got), "\ufffd") && !strings.Contains(strings.ToLower(string(body)), `\ufffd`):
		t.Fatalf("%q: clean, but a lone surrogate became U+FFFD", body)
	case ok && !clean && !strings.Contains(want, "\ufffd"):
		t.Fatalf("%q: not clean, but nothing became U+FFFD", body)
	}
}

func TestUnquoteASCIIIsEncodingJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		parts := rapid.SliceOfN(rapid.SampledFrom([]string{
			"a", "xyz0123456789", " ", `\n`, `\t`, `\r`, `\b`, `\f`, `\/`, `\"`, `\\`, `\u0041`, `\u00e9`,
			`\ud83d`, `\ude00`, `\uD83D`, `\uDE00`, `\ufffd`, `\u12`, `\x`, `\`, `"`, "\n", "\x7f", "é", `\u2028`,
		}), 0, 40).Draw(t, "parts")
		checkAsEncodingJSON(t, []byte(strings.Join(parts, "")))
	})
}

func FuzzUnquoteASCII(f *testing.F) {
	for _, s := range []string{"", "abc", `a\nb`, `\ud800\udc00`, `\ud800x`, `\"`, `\u00`, "\x01"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkAsEncodingJSON(t, body) })
}

func BenchmarkPlainRun(b *testing.B) {
	line := []byte(strings.Repeat("x", 999) + `\n`)
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if PlainRun(line) != 999 {
			b.Fatal()
		}
	}
}
