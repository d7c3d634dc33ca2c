package gate

import (
	"encoding/json"
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
	if res != strOK || next != len(lit) {
		if jsonErr == nil && res != strUTF8 {
			t.Fatalf("%q: skipString %d at %d, but encoding/json reads %q", lit, res, next, want)
		}
		return
	}
	if jsonErr != nil {
		t.Fatalf("%q: skipString accepts, encoding/json: %v", lit, jsonErr)
	}
	body := lit[1 : len(lit)-1]
	got := string(body)
	if esc {
		got = string(unescape(nil, body))
	}
	if got != want {
		t.Fatalf("%q: unescape %q, encoding/json %q", lit, got, want)
	}
}

func TestSpecialMaskFindsTheFirstSpecialByte(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.SliceOfN(rapid.SampledFrom([]byte{'a', ' ', '~', 0x7f, '"', '\\', 0, 0x1f, 0x20, 0x21, 0x80, 0xff, 0xc3}), 0, 40).Draw(t, "b")
		i := rapid.IntRange(0, len(b)).Draw(t, "i")
		want := i
		for want < len(b) && plain[b[want]] {
			want++
		}
		if got := nextSpecial(b, i); got != want {
			t.Fatalf("nextSpecial(%q, %d) = %d, want %d", b, i, got, want)
		}
	})
}
