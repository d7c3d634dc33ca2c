package gate

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestClassifyMatchesGo: the vector classifier agrees with the byte loop on every byte
// value, at every position of a block, and on random blocks.
func TestClassifyMatchesGo(t *testing.T) {
	var all []byte
	for r := range 64 { // every byte value at every position: 256 rotations of 0..255
		for c := range 256 {
			all = append(all, byte(c+r))
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		for range 64 {
			all = append(all, ("\"\\{}[]:, \t\r\n\x00\x1f\x20\x7f\x80\xffau5")[rng.IntN(21)])
		}
	}
	n := len(all) / 64
	got, want := make([]blockMasks, n), make([]blockMasks, n)
	classify(all, got)
	classifyGo(all, want)
	for k := range n {
		if got[k] != want[k] {
			t.Fatalf("block %d (%q): classify %+v, classifyGo %+v", k, all[k*64:k*64+64], got[k], want[k])
		}
	}
}

// TestEscapedBitsMatchesAByteLoop: across blocks, the escaped bytes escapedBits finds
// are those a left-to-right reading finds (a backslash escapes the next byte, unless it
// is escaped itself).
func TestEscapedBitsMatchesAByteLoop(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nb := rapid.IntRange(1, 4).Draw(t, "blocks")
		b := make([]byte, 64*nb)
		for i := range b {
			b[i] = rapid.SampledFrom([]byte(`\\\a"`)).Draw(t, "c")
		}
		var want []bool
		escaped := false
		for _, c := range b {
			want = append(want, escaped)
			escaped = !escaped && c == '\\'
		}
		var carry uint64
		for k := range nb {
			var bs uint64
			for i, c := range b[k*64 : k*64+64] {
				if c == '\\' {
					bs |= 1 << i
				}
			}
			got := escapedBits(bs, &carry)
			for i := range 64 {
				if got>>i&1 == 1 != want[k*64+i] {
					t.Fatalf("%q: byte %d escaped %v, want %v", b, k*64+i, got>>i&1 == 1, want[k*64+i])
				}
			}
		}
		if carry == 1 != escaped {
			t.Fatalf("%q: carry out %d, want %v", b, carry, escaped)
		}
	})
}

// checkScan runs the structural scan on b, with the bytes past len(b) (up to its
// capacity) set to junk, and holds it to check: scan may accept only what check
// accepts, recording the same members, and must accept every valid line it takes.
func checkScan(t interface{ Fatalf(string, ...any) }, b []byte, junk byte) {
	if len(b) > smallLine {
		return
	}
	buf := make([]byte, len(b), len(b)+int(junk)%80)
	copy(buf, b)
	for i := len(b); i < cap(buf); i++ {
		buf[:cap(buf)][i] = "\"\\{}[]:, 0a\x80\xff\x01"[(i+int(junk))%14]
	}
	var sv, cv validator
	ok := sv.scan(buf)
	res := cv.check(b)
	switch {
	case ok && res != vOK:
		t.Fatalf("%q: scan accepts, check says %d", b, res)
	case !ok && res == vOK:
		t.Fatalf("%q: check accepts, scan does not", b)
	case ok && (sv.n != cv.n || sv.members != cv.members):
		t.Fatalf("%q: scan recorded %d %+v, check %d %+v", b, sv.n, sv.members, cv.n, cv.members)
	}
}

// TestScanAgreesWithCheck: on generated JSON and near-JSON the structural scan and the
// token-by-token check agree (check is itself held to encoding/json elsewhere).
func TestScanAgreesWithCheck(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		checkScan(t, genJSONish(t), rapid.Byte().Draw(t, "junk"))
	})
}

// TestScanAtBlockBoundaries puts each kind of string content, good and bad, at every
// offset across the first two block boundaries of a stream frame.
func TestScanAtBlockBoundaries(t *testing.T) {
	pieces := []string{`\n`, `\\`, `\\\\`, `\"`, `\\\"`, `\u00e9`, `\ud83d\ude00`, `\u0g09`, `\x`, `é`, "\xff",
		"\x01", `"`, `\`, `","x":1,"y":"`, `"}`, `"}{"`, `","id":"`, `"],"a":["`}
	for _, p := range pieces {
		for pad := range 140 {
			line := `{"event":"stream","id":"c1","name":"stdout","text":"` + strings.Repeat("a", pad) + p + `z"}`
			checkScan(t, []byte(line), byte(pad))
			spaced := `{ "event" : "stream" , "id" : "c1" , "n" : [ 1 , 2.5e3 , true ] , "text" : "` + strings.Repeat("a", pad) + p + `" }`
			checkScan(t, []byte(spaced), byte(pad+1))
		}
	}
}

// TestScanCutLines: lines cut short, inside a key, a value or an escape, at every length
// around the block boundaries, are refused (and never read past their end).
func TestScanCutLines(t *testing.T) {
	for _, whole := range []string{
		`{"event":"log","id":"` + strings.Repeat("i", 60) + `","` + strings.Repeat("k", 70) + `":"a\\b\"c\u00e9\n` + strings.Repeat("v", 70) + `"}`,
		`{ "event" : "log" , "id" : "x" , "n" : [ 1 , {"` + strings.Repeat("k", 50) + `" : "\\` + strings.Repeat("\\", 40) + `" } ] }`,
	} {
		for n := range len(whole) {
			checkScan(t, []byte(whole[:n]), byte(n))
			checkScan(t, []byte(whole[:n]+`\`), byte(n))
		}
	}
}

// TestScanAcceptsTheBenchmarkLines: the structural scan takes the lines the gate sees
// most, so object does not fall back to check for them.
func TestScanAcceptsTheBenchmarkLines(t *testing.T) {
	data, n := requestFrames(3)
	lines := [][]byte{data[:n-1], bytes.TrimSuffix(streamFrame(1000, "c1", false), []byte("\n")),
		bytes.TrimSuffix(streamFrame(1500, "c1", true), []byte("\n")), bytes.TrimSuffix(displayFrame(2000, "c2"), []byte("\n"))}
	var v validator
	for _, l := range lines {
		if !v.scan(l) {
			t.Fatalf("scan refuses %q", l)
		}
	}
}

// FuzzScan holds the structural scan to check on any bytes.
func FuzzScan(f *testing.F) {
	for _, s := range []string{`{"event":"stream","id":"c1","name":"stdout","text":"hi\n"}`, `{"a":[1,{"b":null}]}`,
		`{"a":"\ud83d\ude00é"}`, `{"event":"a","\u0065vent":"b"}`, "{\"a\":\"\xff\"}", `[1]`, `{"a":1e+5}`,
		`{"event": "host_request", "id": "h1", "type": "fs.read", "args": {"path": "/a\\b\"c", "n": -0.5}}`} {
		f.Add([]byte(s), byte(0))
		f.Add([]byte(s), byte(7))
	}
	f.Fuzz(func(t *testing.T, b []byte, junk byte) { checkScan(t, b, junk) })
}
