package gate

import (
	"reflect"
	"testing"
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
