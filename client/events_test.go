package client

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/kennel-dev/kennel/api"
)

// TestEventDecoderIsEncodingJSON: whatever line a stream reply carries (encoding/json's
// events, the daemon's stream lines with the kernel's escapes, lines near that layout),
// the event decoder gives exactly the event and the error verdict encoding/json gives.
func TestEventDecoderIsEncodingJSON(t *testing.T) {
	var d eventDecoder
	rapid.Check(t, func(t *rapid.T) {
		parts := rapid.SliceOfN(rapid.SampledFrom([]string{
			"a", "x y", `\n`, `\"`, `\\`, `\u00e9`, `\ud83d\ude00`, `\ud800`, "é", `"`, `\x`, "\x01", `\/`,
		}), 0, 30).Draw(t, "parts")
		body := strings.Join(parts, "")
		name := rapid.SampledFrom([]string{"stdout", "stderr", "stdin"}).Draw(t, "name")
		text := strings.Join(parts, "|")
		marshalled, _ := json.Marshal(api.Event{Type: "stream", Name: name, Text: text})
		line := rapid.SampledFrom([]string{
			`{"type":"stream","name":"` + name + `","text":"` + body + `"}`,
			`{"type":"stream","name":"` + name + `","text":"` + body + `","bytes":3}`,
			`{"type":"display","name":"` + name + `","text":"` + body + `"}`,
			string(marshalled),
		}).Draw(t, "line")
		var got, want api.Event
		err := d.decode([]byte(line), &got)
		werr := json.Unmarshal([]byte(line), &want)
		if (err == nil) != (werr == nil) {
			t.Fatalf("%s: decode %v, encoding/json %v", line, err, werr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: decode %+v, encoding/json %+v", line, got, want)
		}
	})
}
