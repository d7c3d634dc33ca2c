package gate

import (
	"bytes"
	"encoding/json"
	"math/bits"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestValidatorCases(t *testing.T) {
	good := []string{
		`{}`, ` { } `, `{"a":1}`, `{"event":"x","id":"y","args":{"a":[1,2.5,-0,1e3,true,false,null,"\u00e9"]}}`,
		"{\"a\":\"\xc3\xa9\xe2\x80\xa8\xf0\x9f\x98\x80\"}", `{"a":"\ud800"}`, `{"a":{"event":1,"event":2}}`,
		`{"a":"0123456789abcdef0123456789abcdef\"0123456789abcdef"}`, `{"":""}`, "{\t\"a\"\r:\r[ ]}",
	}
	bad := []string{
		``, ` `, `[]`, `"x"`, `1`, `null`, `{`, `}`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{,}`, `{"a":1}x`, `{"a":1}{}`,
		`{"a":[1,]}`, `{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":.5}`, `{"a":1e}`, `{"a":tru}`, `{"a":nulll}`,
		"{\"a\":\"\x01\"}", "{\"a\":\"\xff\"}", "{\"a\":\"\xed\xa0\x80\"}", `{"a":"\x"}`, `{"a":"\u12g4"}`,
		`{"a":"unterminated}`, `{'a':1}`, `{"a":1]`, `{"a":[1}`, `{a:1}`, "{\"a\":1}\x00",
		`{"event":"a","event":"b"}`, `{"id":"a","\u0069d":"b"}`, `{"type":1,"x":2,"type":3}`,
	}
	var v validator
	for _, s := range good {
		if got := v.object([]byte(s)); got != vOK || !refObject([]byte(s)) {
			t.Errorf("%q: validator %d, reference %v; want both to accept", s, got, refObject([]byte(s)))
		}
	}
	for _, s := range bad {
		if got := v.object([]byte(s)); got == vOK || refObject([]byte(s)) {
			t.Errorf("%q: validator %d, reference %v; want both to refuse", s, got, refObject([]byte(s)))
		}
	}
}

func TestValidatorDepthMatchesEncodingJSON(t *testing.T) {
	var v validator
	for _, d := range []int{maxDepth - 1, maxDepth, maxDepth + 1} {
		// An object holding d-1 nested arrays is d deep.
		s := `{"a":` + strings.Repeat("[", d-1) + strings.Repeat("]", d-1) + "}"
		want := json.Valid([]byte(s))
		if got := v.object([]byte(s)) == vOK; got != want {
			t.Errorf("depth %d: validator %v, json.Valid %v", d, got, want)
		}
		if (d <= maxDepth) != want {
			t.Errorf("depth %d: json.Valid %v: encoding/json's limit moved", d, want)
		}
	}
}

// TestValidatorMatchesReference: on generated JSON and near-JSON the validator accepts
// exactly what the reference (encoding/json plus the gate's key rule) accepts.
func TestValidatorMatchesReference(t *testing.T) {
	var v validator
	rapid.Check(t, func(t *rapid.T) {
		b := genJSONish(t)
		if got, want := v.object(b) == vOK, refObject(b); got != want {
			t.Fatalf("%q: validator %v, reference %v", b, got, want)
		}
	})
}

func FuzzValidator(f *testing.F) {
	for _, s := range []string{`{"event":"stream","id":"c1","name":"stdout","text":"hi\n"}`, `{"a":[1,{"b":null}]}`,
		`{"a":"\ud83d\ude00é"}`, `{"event":"a","\u0065vent":"b"}`, "{\"a\":\"\xff\"}", `[1]`, `{"a":1e+5}`} {
		f.Add([]byte(s))
	}
	var v validator
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := v.object(b) == vOK, refObject(b); got != want {
			t.Fatalf("%q: validator %v, reference %v", b, got, want)
		}
	})
}

// TestUnescapeMatchesEncodingJSON: every string body skipString accepts decodes as
// encoding/json decodes it.
func TestUnescapeMatchesEncodingJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		lit := genJSONString(t)
		checkUnescape(t, []byte(lit))
	})
}

func FuzzUnescape(f *testing.F) {
	for _, s := range []string{`"a"`, `"\ud83d\ude00"`, `"\ud800\ud800"`, `"\udc00"`, `"\u00e9\n"`, "\"\xc3\"", `"\u"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, lit []byte) { checkUnescape(t, lit) })
}

func checkUnescape(t interface{ Fatalf(string, ...any) }, lit []byte) {
	if len(lit) == 0 || lit[0] != '"' {
		return
	}
	next, esc, res := skipString(lit, 1)
	var want string
	jsonErr := json.Unmarshal(lit, &want)
	switch {
	case res == strUTF8: // encoding/json does not check UTF-8; the gate does
		return
	case res != strOK:
		if jsonErr == nil {
			t.Fatalf("%q: skipString %d at %d, but encoding/json reads %q", lit, res, next, want)
		}
		return
	case len(bytes.Trim(lit[next:], " \t\r\n")) != 0: // more after the string
		if jsonErr == nil {
			t.Fatalf("%q: encoding/json reads %q past the string's end at %d", lit, want, next)
		}
		return
	}
	if jsonErr != nil {
		t.Fatalf("%q: skipString accepts, encoding/json: %v", lit, jsonErr)
	}
	body := lit[1 : next-1]
	got := string(body)
	if esc {
		got = string(unescape(nil, body))
	}
	if got != want {
		t.Fatalf("%q: unescape %q, encoding/json %q", lit, got, want)
	}
}

// TestStrSkipMatchesAByteLoop: the vector and the SWAR scanners agree with a byte loop
// on every length and alignment, around every threshold byte and escape.
func TestStrSkipMatchesAByteLoop(t *testing.T) {
	naive := strSkipNaive
	rapid.Check(t, func(t *rapid.T) {
		common := rapid.SampledFrom([]byte{'a', ' ', '~', 0x7f, 0x80, 0xff, 0xc3, 0x21, 0x23, 0x5b, 0x5d, 'n', 'u', '0', 'F', 'f', 'g'})
		rare := rapid.SampledFrom([]byte{'"', '\\', '\\', '\\', 0, 0x1f, 0x20, 0x0a})
		n := rapid.IntRange(0, 300).Draw(t, "n")
		b := make([]byte, n)
		for i := range b {
			b[i] = common.Draw(t, "c")
		}
		for range rapid.IntRange(0, 12).Draw(t, "specials") {
			if n > 0 {
				b[rapid.IntRange(0, n-1).Draw(t, "at")] = rare.Draw(t, "s")
			}
		}
		off := rapid.IntRange(0, min(n, 40)).Draw(t, "off")
		want, wantEsc := naive(b[off:])
		wantHigh := bytes.ContainsFunc(b[off:off+want], func(r rune) bool { return r >= 0x80 })
		for name, skip := range map[string]func([]byte) (int, bool, bool){"strSkip": strSkip, "strSkipGo": strSkipGo} {
			got, esc, high := skip(b[off:])
			if got != want || esc != wantEsc || wantHigh && !high {
				t.Fatalf("%s(%q) = %d, %v, %v; want %d, %v, %v", name, b[off:], got, esc, high, want, wantEsc, wantHigh)
			}
		}
		// specialMask also stops at non-ASCII bytes; its lowest flag is exact.
		for i := 0; i+8 <= len(b); i++ {
			m := specialMask(uint64(b[i]) | uint64(b[i+1])<<8 | uint64(b[i+2])<<16 | uint64(b[i+3])<<24 |
				uint64(b[i+4])<<32 | uint64(b[i+5])<<40 | uint64(b[i+6])<<48 | uint64(b[i+7])<<56)
			first := 8
			for k := 0; k < 8; k++ {
				if c := b[i+k]; !plain[c] {
					first = k
					break
				}
			}
			got := 8
			if m != 0 {
				got = bits.TrailingZeros64(m) >> 3
			}
			if got != first {
				t.Fatalf("specialMask(%q) first %d, want %d", b[i:i+8], got, first)
			}
		}
	})
}

// strSkipNaive is strSkip a byte at a time: the plainest statement of what it skips.
func strSkipNaive(b []byte) (int, bool) {
	esc := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c == '\\' && i+1 < len(b) && strings.IndexByte(`"\\/bfnrt`, b[i+1]) >= 0 {
			esc = true
			i++
			continue
		}
		if c == '\\' && i+5 < len(b) && b[i+1] == 'u' && hex4(b[i+2:i+6]) >= 0 {
			esc = true
			i += 5
			continue
		}
		if c == '"' || c == '\\' || c < 0x20 {
			return i, esc
		}
	}
	return len(b), esc
}

// TestStrSkipAtBlockBoundaries: the 64-byte vector scan against the byte loop with every
// kind of escape and backslash run placed at every offset across a block boundary,
// where the run's carry and a \u escape's digits cross from one block to the next.
func TestStrSkipAtBlockBoundaries(t *testing.T) {
	pieces := []string{`\n`, `\\`, `\\\\`, `\\\`, `\"`, `\u00e9`, `\u00E9`, `\u0g09`, `\u12`, `\x`, `\`, "\\\x01",
		`"`, "\x01", "\x80", `\\\"`, `\/\b\f\r\t`}
	for _, size := range []int{64, 65, 100, 127, 128, 129, 200} {
		for _, p := range pieces {
			for at := 0; at+len(p) <= size; at++ {
				if at > 8 && at < 54 || at > 70 && at < 118 || at > 134 && at+len(p) < size-8 {
					continue // far from a boundary and from the end
				}
				b := bytes.Repeat([]byte("a"), size)
				copy(b[at:], p)
				want, wantEsc := strSkipNaive(b)
				got, esc, _ := strSkip(b)
				if got != want || esc != wantEsc {
					t.Fatalf("size %d, %q at %d: strSkip = %d, %v; want %d, %v", size, p, at, got, esc, want, wantEsc)
				}
				if got, esc, _ := strSkipGo(b); got != want || esc != wantEsc {
					t.Fatalf("size %d, %q at %d: strSkipGo = %d, %v; want %d, %v", size, p, at, got, esc, want, wantEsc)
				}
			}
		}
	}
}
