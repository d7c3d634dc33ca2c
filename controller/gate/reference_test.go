package gate

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/kennel-dev/kennel/protocol"
)

// refGate is a second statement of the gate, on bytes, built from encoding/json instead
// of the gate's own scanners: it splits input into lines and decides on each. The fuzz
// target checks the gate against it on arbitrary bytes.
func refGate(input []byte, lim limits, served func(string) bool) []Outcome {
	var out []Outcome
	var accepted []string
	inUse := func(id string) bool {
		for _, a := range accepted[max(0, len(accepted)-lim.idsKept):] {
			if a == id {
				return true
			}
		}
		return false
	}
	for len(input) > 0 {
		nl := bytes.IndexByte(input, '\n')
		line, cut := input, nl < 0
		if !cut {
			line, input = input[:nl], input[nl+1:]
		} else {
			input = nil
		}
		headLen := min(len(line), lim.headSize)
		if len(line) >= lim.maxLine { // with its newline, over the limit
			hd, ok := refHead(line[:min(len(line), lim.headSize)])
			switch {
			case ok && hd.event == "host_request" && inUse(hd.id):
				out = append(out, Outcome{Kind: "refuse", ID: hd.id, Status: protocol.StatusDuplicate, Code: protocol.CodeDuplicate}, Outcome{Kind: "diag"})
			case ok && hd.event == "host_request":
				out = append(out, Outcome{Kind: "refuse", ID: hd.id, Status: protocol.StatusError, Code: protocol.CodeTooLarge})
			case ok && (hd.event == "stream" || hd.event == "display"):
				out = append(out, Outcome{Kind: "diag"})
			default:
				return append(out, Outcome{Kind: "fault"})
			}
			if cut {
				return append(out, Outcome{Kind: "fault"})
			}
			continue
		}
		if cut || !refObject(line) {
			return append(out, Outcome{Kind: "fault"})
		}
		hd, ok := refHead(line[:headLen])
		switch {
		case !ok:
			return append(out, Outcome{Kind: "fault"})
		case hd.event != "host_request":
			out = append(out, Outcome{Kind: "event", ID: hd.id, Event: hd.event, Len: len(line)})
		case inUse(hd.id):
			out = append(out, Outcome{Kind: "refuse", ID: hd.id, Status: protocol.StatusDuplicate, Code: protocol.CodeDuplicate}, Outcome{Kind: "diag"})
		case !hd.hasType:
			out = append(out, Outcome{Kind: "refuse", ID: hd.id, Status: protocol.StatusError, Code: protocol.CodeNoType})
		case !served(hd.typ):
			out = append(out, Outcome{Kind: "refuse", ID: hd.id, Status: protocol.StatusError, Code: protocol.CodeUnserved})
		default:
			out = append(out, Outcome{Kind: "run", ID: hd.id, Type: hd.typ, Len: len(line)})
			accepted = append(accepted, hd.id)
		}
	}
	return out
}

type refHeadResult struct {
	event, id, typ string
	hasType        bool
}

// refHead reads a head with json.Decoder's tokenizer: '{', "event", a string, "id", a
// string, and for a host request "type" and a string; each token must lie within h and
// the bytes up to it must be valid UTF-8 (the decoder would replace bad bytes).
func refHead(h []byte) (r refHeadResult, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(h))
	next := func() (json.Token, bool) {
		tok, err := dec.Token()
		if err != nil || !utf8.Valid(h[:dec.InputOffset()]) {
			return nil, false
		}
		return tok, true
	}
	str := func() (string, bool) {
		tok, ok := next()
		s, isStr := tok.(string)
		return s, ok && isStr
	}
	if tok, ok := next(); !ok || tok != json.Delim('{') {
		return r, false
	}
	if k, ok := str(); !ok || k != "event" {
		return r, false
	}
	if r.event, ok = str(); !ok {
		return r, false
	}
	if k, ok := str(); !ok || k != "id" {
		return r, false
	}
	if r.id, ok = str(); !ok {
		return r, false
	}
	if r.event != "host_request" {
		return r, true
	}
	if k, ok := str(); !ok || k != "type" {
		return r, true
	}
	r.typ, r.hasType = str()
	return r, true
}
