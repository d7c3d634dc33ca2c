package client

import (
	"bytes"
	"encoding/json"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/internal/jsonstr"
)

// The daemon's stream event line: {"type":"stream","name":NAME,"text":TEXT}.
var (
	streamEventHead = []byte(`{"type":"stream","name":"`)
	streamEventText = []byte(`","text":"`)
	streamEventTail = []byte(`"}`)
)

// eventDecoder decodes the events of one streamed reply. A stream event in exactly the
// daemon's layout with ASCII text (what it sends for a kernel's output) is decoded in one
// pass (jsonstr.UnquoteASCII, as encoding/json decodes it); any other line goes through
// encoding/json. Both give the same event.
type eventDecoder struct {
	buf []byte
}

func (d *eventDecoder) decode(line []byte, ev *api.Event) error {
	if d.stream(line, ev) {
		return nil
	}
	return json.Unmarshal(line, ev)
}

// stream decodes line into ev when it is a stream event in the daemon's layout.
func (d *eventDecoder) stream(line []byte, ev *api.Event) bool {
	rest, ok := bytes.CutPrefix(line, streamEventHead)
	if !ok {
		return false
	}
	var name string
	switch {
	case bytes.HasPrefix(rest, []byte("stdout")):
		name = "stdout"
	case bytes.HasPrefix(rest, []byte("stderr")):
		name = "stderr"
	default:
		return false
	}
	if rest, ok = bytes.CutPrefix(rest[len(name):], streamEventText); !ok {
		return false
	}
	body, ok := bytes.CutSuffix(rest, streamEventTail)
	if !ok {
		return false
	}
	text, _, ok := jsonstr.UnquoteASCII(body, &d.buf)
	if !ok || len(text) == 0 {
		return false // empty text: encoding/json leaves Text as it was, keep its answer
	}
	*ev = api.Event{Type: "stream", Name: name, Text: string(text)}
	if cap(d.buf) > 4<<20 {
		d.buf = nil
	}
	return true
}
