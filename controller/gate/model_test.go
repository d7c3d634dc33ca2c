package gate

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/kennel-dev/kennel/protocol"
	"pgregory.net/rapid"
)

// GenFrame is one generated line of a kernel's stdout.
type GenFrame struct {
	Kind  string // "request", "notype", "event", "bad" or "cut"
	Event string // event: its name
	ID    string
	Type  string // request: its type
	Bad   string // bad: which fault
	Len   int    // the line's exact length with its newline ("cut": without)
	Style int    // serialisation: bit 0 spaced separators, bit 1 ASCII-only escapes
	Seed  uint64 // the padding's content
}

// Model is the gate's rules stated as plainly as possible, on frames rather than bytes:
// the expected outcomes of a stream, frame by frame, up to the first fault.
func Model(frames []GenFrame, lim limits, served func(string) bool) []Outcome {
	var out []Outcome
	var accepted []string // every accepted id, oldest first
	inUse := func(id string) bool {
		newest := accepted[max(0, len(accepted)-lim.idsKept):]
		for _, a := range newest {
			if a == id {
				return true
			}
		}
		return false
	}
	for _, f := range frames {
		over := f.Len > lim.maxLine
		switch f.Kind {
		case "bad":
			return append(out, Outcome{Kind: "fault"})
		case "cut":
			// Cut by EOF: a fault, but once a line has maxLine bytes without a newline
			// it is over the limit whatever follows, and decided on as such first.
			if f.Len >= lim.maxLine && (f.Event == "stream" || f.Event == "display") {
				out = append(out, Outcome{Kind: "diag"})
			}
			return append(out, Outcome{Kind: "fault"})
		case "request", "notype":
			switch {
			case inUse(f.ID):
				out = append(out, Outcome{Kind: "refuse", ID: f.ID, Status: protocol.StatusDuplicate, Code: protocol.CodeDuplicate}, Outcome{Kind: "diag"})
			case over:
				out = append(out, Outcome{Kind: "refuse", ID: f.ID, Status: protocol.StatusError, Code: protocol.CodeTooLarge})
			case f.Kind == "notype":
				out = append(out, Outcome{Kind: "refuse", ID: f.ID, Status: protocol.StatusError, Code: protocol.CodeNoType})
			case !served(f.Type):
				out = append(out, Outcome{Kind: "refuse", ID: f.ID, Status: protocol.StatusError, Code: protocol.CodeUnserved})
			default:
				out = append(out, Outcome{Kind: "run", ID: f.ID, Type: f.Type, Len: f.Len - 1})
				accepted = append(accepted, f.ID)
			}
		case "event":
			switch {
			case !over:
				out = append(out, Outcome{Kind: "event", ID: f.ID, Event: f.Event, Len: f.Len - 1})
			case f.Event == "stream" || f.Event == "display":
				out = append(out, Outcome{Kind: "diag"})
			default:
				return append(out, Outcome{Kind: "fault"})
			}
		}
	}
	return out
}

// pyString encodes s as Python's json.dumps does: ensure_ascii escapes every non-ASCII
// rune as \uXXXX (surrogate pairs above U+FFFF).
func pyString(s string, ascii bool) string {
	var sb strings.Builder
	sb.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			sb.WriteString(`\"`)
		case r == '\\':
			sb.WriteString(`\\`)
		case r == '\n':
			sb.WriteString(`\n`)
		case r < 0x20:
			fmt.Fprintf(&sb, `\u%04x`, r)
		case r >= 0x80 && ascii && r > 0xffff:
			r -= 0x10000
			fmt.Fprintf(&sb, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		case r >= 0x80 && ascii:
			fmt.Fprintf(&sb, `\u%04x`, r)
		default:
			sb.WriteRune(r)
		}
	}
	sb.WriteByte('"')
	return sb.String()
}

// padPieces are what padding is made of: plain text, escapes, multi-byte UTF-8.
var padPieces = []string{"x", "hello world ", "\n", "\"", "\\", "é", "€", "😀", "\t", "0123456789abcdef"}

// serialize writes f as the stub does (json.dumps, event and id first), padded to exactly
// f.Len bytes; "bad" frames are the faulty line they name.
func serialize(f GenFrame, lim limits) []byte {
	ascii := f.Style&2 != 0
	colon, comma := ":", ","
	if f.Style&1 != 0 {
		colon, comma = ": ", ", "
	}
	kv := func(k, v string) string { return pyString(k, ascii) + colon + v }
	if f.Kind == "bad" {
		return badLine(f, lim)
	}
	var pre, post string
	switch f.Kind {
	case "request", "notype":
		pre = "{" + kv("event", pyString("host_request", ascii)) + comma + kv("id", pyString(f.ID, ascii))
		if f.Kind == "request" {
			pre += comma + kv("type", pyString(f.Type, ascii))
		}
		pre += comma + kv("cell", pyString("c1", ascii)) + comma + pyString("args", ascii) + colon + "{" + pyString("text", ascii) + colon + `"`
		post = `"}}`
	case "event", "cut":
		pre = "{" + kv("event", pyString(f.Event, ascii)) + comma + kv("id", pyString(f.ID, ascii))
		switch f.Event {
		case "stream":
			pre += comma + kv("name", `"stdout"`) + comma + pyString("text", ascii) + colon + `"`
			post = `"}`
		case "display":
			pre += comma + pyString("data", ascii) + colon + "{" + pyString("text/plain", ascii) + colon + `"`
			post = `"}}`
		default:
			pre += comma + pyString("message", ascii) + colon + `"`
			post = `"}`
		}
	}
	n := f.Len - len(pre) - len(post)
	if f.Kind != "cut" {
		n--
	}
	if f.Len == 0 { // the smallest line
		n = 0
	}
	if n < 0 {
		panic(fmt.Sprintf("frame %+v shorter than its skeleton", f))
	}
	line := []byte(pre)
	line = append(line, padding(n, f.Seed, ascii)...)
	line = append(line, post...)
	if f.Kind != "cut" {
		line = append(line, '\n')
	}
	return line
}

// padding returns exactly n bytes of JSON string body.
func padding(n int, seed uint64, ascii bool) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	var b []byte
	for len(b) < n {
		p := pyString(padPieces[rng.IntN(len(padPieces))], ascii)
		p = p[1 : len(p)-1]
		if len(b)+len(p) > n {
			p = "x"
		}
		b = append(b, p...)
	}
	return b
}

// badLine returns a faulty line of f's kind.
func badLine(f GenFrame, lim limits) []byte {
	switch f.Bad {
	case "notjson":
		return []byte("Traceback (most recent call last):\n")
	case "utf8":
		return []byte("{\"event\":\"stream\",\"id\":\"a\",\"text\":\"\xff\xfe\"}\n")
	case "array":
		return []byte(`[{"event":"stream","id":"a"}]` + "\n")
	case "noevent":
		return []byte(`{"id":"a","event":"stream","name":"stdout","text":""}` + "\n")
	case "noid":
		return []byte(`{"event":"stream","name":"stdout","text":""}` + "\n")
	case "empty":
		return []byte("\n")
	case "dupkey":
		return []byte(`{"event":"stream","id":"a","event":"host_request"}` + "\n")
	case "headerless":
		return append(bytes.Repeat([]byte("A"), lim.maxLine+7), '\n')
	case "bigdone":
		pre := `{"event":"done","id":"c1","status":"ok","result":"`
		return []byte(pre + strings.Repeat("x", lim.maxLine) + `","error":null}` + "\n")
	}
	panic("unknown bad line " + f.Bad)
}

var (
	genIDs    = []string{"a", "b", "c", "d", "e", "f", "é", `q"`, "", "😀"}
	genTypes  = []string{"fs.read", "fs.write", "rlm.run", "nope", "fs.delete"}
	genEvents = []string{"stream", "display", "done", "hello", "log", "job_output", "mystery"}
	genBads   = []string{"notjson", "utf8", "array", "noevent", "noid", "empty", "dupkey", "headerless", "bigdone"}
)

// genFrame draws one frame; its length is at, just under or just over the limit, at
// its smallest, anywhere, or far over (beyond the gate's buffer).
func genFrame(t *rapid.T, lim limits) GenFrame {
	f := GenFrame{
		Kind:  rapid.SampledFrom([]string{"request", "request", "request", "notype", "event", "event"}).Draw(t, "kind"),
		ID:    rapid.SampledFrom(genIDs).Draw(t, "id"),
		Style: rapid.IntRange(0, 3).Draw(t, "style"),
		Seed:  rapid.Uint64().Draw(t, "seed"),
	}
	switch f.Kind {
	case "request":
		f.Type = rapid.SampledFrom(genTypes).Draw(t, "type")
	case "event":
		f.Event = rapid.SampledFrom(genEvents).Draw(t, "event")
	}
	f.Len = 0
	smallest := len(serialize(f, lim))
	switch rapid.IntRange(0, 6).Draw(t, "len") {
	case 0:
		f.Len = lim.maxLine
	case 1:
		f.Len = lim.maxLine - 1
	case 2:
		f.Len = lim.maxLine + 1
	case 3:
		f.Len = smallest
	case 4:
		f.Len = rapid.IntRange(smallest, lim.maxLine+20).Draw(t, "n")
	case 5:
		f.Len = rapid.IntRange(lim.maxLine, 3*lim.maxLine).Draw(t, "n")
	default:
		f.Len = rapid.IntRange(5000, 12000).Draw(t, "n")
	}
	f.Len = max(f.Len, smallest)
	return f
}

// genLimits draws small limits so that lines over the limit are cheap.
func genLimits(t *rapid.T) limits {
	lim := limits{maxLine: rapid.IntRange(140, 320).Draw(t, "maxLine"), idsKept: rapid.IntRange(1, 6).Draw(t, "idsKept")}
	lim.headSize = rapid.IntRange(100, 140).Draw(t, "headSize")
	return lim
}

// TestGateEqualsModel generates streams of frames (few ids so duplicates happen, every
// kind, lengths around the limit), writes them as the stub does, cuts the bytes into
// reads of random sizes, and checks the gate's outcomes equal the model's, frame by frame.
func TestGateEqualsModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		lim := genLimits(t)
		frames := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) GenFrame { return genFrame(t, lim) }), 0, 40).Draw(t, "frames")
		switch rapid.IntRange(0, 3).Draw(t, "end") {
		case 0:
			frames = append(frames, GenFrame{Kind: "bad", Bad: rapid.SampledFrom(genBads).Draw(t, "bad")})
		case 1:
			f := GenFrame{Kind: "cut", Event: "stream", ID: "a", Seed: 1}
			smallest := len(serialize(f, lim))
			f.Len = rapid.SampledFrom([]int{smallest, lim.maxLine - 1, lim.maxLine, lim.maxLine + 1,
				smallest + rapid.IntRange(0, 2*lim.maxLine).Draw(t, "cutlen")}).Draw(t, "cut")
			f.Len = max(f.Len, smallest)
			frames = append(frames, f)
		}
		var stream []byte
		for _, f := range frames {
			line := serialize(f, lim)
			if f.Kind != "bad" && len(line) != f.Len {
				t.Fatalf("serialised %d bytes, want %d: %q", len(line), f.Len, line)
			}
			stream = append(stream, line...)
		}
		sizes := rapid.SliceOfN(rapid.OneOf(rapid.IntRange(1, 3), rapid.IntRange(1, 700), rapid.IntRange(0, 9000)), 1, 8).Draw(t, "reads")
		sizes = append(sizes, 1) // never only empty reads
		rec, err := runGate(t, lim, serves, &chunkReader{data: stream, sizes: sizes})
		if fault := (*ProtocolFault)(nil); err != nil && !errors.As(err, &fault) {
			t.Fatalf("Run: %v", err)
		}
		want := Model(frames, lim, serves)
		if !reflect.DeepEqual(rec.outs, want) {
			t.Fatalf("limits %+v\n got %v\nwant %v", lim, rec.outs, want)
		}
		checkLaws(t, frames, rec.outs, lim)
		// What reached a handler or OnEvent is the line the kernel wrote, byte for byte.
		li := 0
		var lines [][]byte
		for _, f := range frames {
			if f.Kind == "request" || f.Kind == "event" || f.Kind == "notype" {
				lines = append(lines, serialize(f, lim))
			}
		}
		fi := 0
		for _, o := range rec.outs {
			if o.Kind != "run" && o.Kind != "event" {
				continue
			}
			for ; fi < len(lines); fi++ {
				if len(lines[fi])-1 == o.Len && bytes.Equal(lines[fi][:o.Len], rec.lines[li]) {
					break
				}
			}
			if fi == len(lines) {
				t.Fatalf("%v: line %q is no frame's line, in order", o, rec.lines[li])
			}
			fi++
			li++
		}
	})
}

// checkLaws states the reference's laws (proto_*) directly on the outcomes.
func checkLaws(t *rapid.T, frames []GenFrame, outs []Outcome, lim limits) {
	requests, replies, runs := 0, 0, 0
	faulted := len(outs) > 0 && outs[len(outs)-1].Kind == "fault"
	for _, f := range frames {
		if f.Kind == "bad" || f.Kind == "cut" || (f.Kind == "event" && f.Len > lim.maxLine && f.Event != "stream" && f.Event != "display") {
			break
		}
		if f.Kind == "request" || f.Kind == "notype" {
			requests++
		}
	}
	for _, o := range outs {
		switch o.Kind {
		case "run":
			runs++
			replies++
			if o.Len+1 > lim.maxLine || !serves(o.Type) { // proto_runs_only_accepted
				t.Fatalf("ran %v: over the limit or unserved", o)
			}
		case "refuse":
			replies++
			if o.Status == protocol.StatusDuplicate && o.Code != protocol.CodeDuplicate || o.Status == protocol.StatusError && o.Code == protocol.CodeDuplicate {
				t.Fatalf("refusal %v: status and code disagree", o)
			}
		}
	}
	if replies != requests { // proto_one_reply_each
		t.Fatalf("%d host requests, %d replies (fault %v)", requests, replies, faulted)
	}
	// proto_rejects_oversize: every request over the limit got a refusal.
	ri := 0
	for _, f := range frames {
		if f.Kind != "request" && f.Kind != "notype" {
			continue
		}
		for ri < len(outs) && outs[ri].Kind != "run" && outs[ri].Kind != "refuse" {
			ri++
		}
		if ri == len(outs) {
			break
		}
		if f.Len > lim.maxLine && outs[ri].Kind != "refuse" {
			t.Fatalf("oversized request %+v got %v", f, outs[ri])
		}
		ri++
	}
}
