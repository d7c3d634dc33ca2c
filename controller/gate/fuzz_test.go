package gate

import (
	"reflect"
	"testing"

	"pgregory.net/rapid"
)

// fuzzLimits are small so that every rule, over the limit too, is within the fuzzer's reach.
var fuzzLimits = limits{maxLine: 96, headSize: 64, idsKept: 3}

// FuzzGate runs the gate on arbitrary bytes, read in chunks of a fuzzed size. It never
// panics; it returns nil or a *ProtocolFault; its outcomes equal refGate's (the rules
// restated with encoding/json); every accepted id is unique among the last idsKept
// accepted; every refusal names an id the line's head holds (refGate reads the same).
func FuzzGate(f *testing.F) {
	seeds := []string{
		`{"event":"host_request","id":"a","type":"fs.read","cell":"c1","args":{}}` + "\n",
		`{"event":"host_request","id":"a","type":"fs.read","cell":"c1","args":{}}` + "\n" + `{"event":"host_request","id":"a","type":"nope"}` + "\n",
		`{"event":"host_request","id":"b","cell":"c1"}` + "\n" + `{"event":"host_request","id":"c","type":null}` + "\n",
		`{ "event" : "stream" , "id" : "c\u0031", "name":"stdout","text":"hi\n"}` + "\n",
		`{"event":"host_request","id":"big","type":"fs.read","args":{"x":"` + "0123456789012345678901234567890123456789012345678901234567890123456789" + `"}}` + "\n",
		`{"event":"stream","id":"big","text":"` + "0123456789012345678901234567890123456789012345678901234567890123456789" + `"}` + "\n",
		"{\"event\":\"log\",\"id\":\"\",\"message\":\"\xff\"}\n", "[1]\n", "\n", `{"event":"log","id":""}`,
		`{"\u0065vent":"host_request","\u0069d":"\ud83d\ude00","type":"rlm.run"}` + "\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s), uint16(0))
		f.Add([]byte(s), uint16(1))
	}
	f.Fuzz(func(t *testing.T, input []byte, chunk uint16) {
		var sizes []int
		if chunk > 0 {
			sizes = []int{int(chunk)}
		}
		rec, err := runGate(t, fuzzLimits, serves, &chunkReader{data: input, sizes: sizes})
		if err != nil && !isFault(err) {
			t.Fatalf("Run: %v", err)
		}
		want := refGate(input, fuzzLimits, serves)
		if !reflect.DeepEqual(rec.outs, want) {
			t.Fatalf("input %q\n got %v\nwant %v", input, rec.outs, want)
		}
		var accepted []string
		for _, o := range rec.outs {
			if o.Kind != "run" {
				continue
			}
			for _, a := range accepted[max(0, len(accepted)-fuzzLimits.idsKept):] {
				if a == o.ID {
					t.Fatalf("id %q accepted twice within %d", o.ID, fuzzLimits.idsKept)
				}
			}
			accepted = append(accepted, o.ID)
		}
	})
}

// FuzzHead checks the head scanner against refHead (json.Decoder's tokenizer) on any
// bytes: the same verdict, and the same event, id and type.
func FuzzHead(f *testing.F) {
	for _, s := range []string{
		`{"event":"host_request","id":"a","type":"fs.read"`, `{ "event" : "stream" , "id" : "c\u0031"`,
		`{"\u0065vent":"host_request","id":"\ud83d\ude00","type":null}`, `{"event":"host_request","id":"a","typ`,
		`{"id":"a"}`, "{\"event\":\"x\",\"id\":\"\xff\"}", `{"event":"log","id":"\ud800`,
	} {
		f.Add([]byte(s))
	}
	var s headScanner
	f.Fuzz(func(t *testing.T, h []byte) {
		got := s.scan(h)
		want, ok := refHead(h)
		if got.ok != ok {
			t.Fatalf("%q: scan ok=%v (%s), refHead ok=%v", h, got.ok, got.why, ok)
		}
		if !ok {
			return
		}
		if string(got.event) != want.event || string(got.id) != want.id || got.hasType != want.hasType || string(got.typ) != want.typ {
			t.Fatalf("%q: scan %q %q %v %q, refHead %+v", h, got.event, got.id, got.hasType, got.typ, want)
		}
	})
}

// TestHeadMatchesReference runs FuzzHead's check on generated JSON-ish heads, cut at
// every length.
func TestHeadMatchesReference(t *testing.T) {
	var s headScanner
	rapid.Check(t, func(t *rapid.T) {
		b := genJSONish(t)
		for n := 0; n <= len(b); n++ {
			h := b[:n]
			got := s.scan(h)
			want, ok := refHead(h)
			if got.ok != ok || ok && (string(got.event) != want.event || string(got.id) != want.id || got.hasType != want.hasType || string(got.typ) != want.typ) {
				t.Fatalf("%q: scan %v %q %q %v %q, refHead %v %+v", h, got.ok, got.event, got.id, got.hasType, got.typ, ok, want)
			}
		}
	})
}
