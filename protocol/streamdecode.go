package protocol

import (
	"bytes"
	"unicode/utf8"

	"github.com/kennel-dev/kennel/internal/jsonstr"
)

// StreamDecoder decodes the stream frames of one kernel for the host's hot path (a cell
// printing 50 MB passes every byte through it). A line in exactly the stub's layout
// (`{"event":"stream","id":ID,"name":NAME,"text":TEXT}`, no whitespace, ASCII) is
// decoded in one pass without encoding/json; any other line goes through DecodeStream.
// Both paths give the same stream and refuse the same lines (a fuzz test holds them to
// it). The zero value is ready to use; a decoder is for one goroutine at a time.
type StreamDecoder struct {
	buf []byte // the fast path's text, kept for the next frame up to streamKeep
}

// streamKeep is the largest buffer a StreamDecoder keeps between frames.
const streamKeep = 4 << 20

// StreamText is one stream frame as StreamDecoder gives it.
type StreamText struct {
	Name string // StreamStdout or StreamStderr
	// Text is the text's UTF-8 bytes, exactly DecodeStream's Text.
	Text []byte
	// Quoted, when not nil, is Text as a JSON string literal, quotes included, as the
	// frame carried it: ASCII, and decoding it (by any JSON decoder) gives exactly Text.
	// It is nil when the frame's text held an escape JSON decoders differ on (a lone
	// surrogate, which encoding/json decodes to U+FFFD) or the frame was not in the
	// stub's layout.
	Quoted []byte
}

// Decode decodes line, a stream frame that must name id (the id the gate read from it).
// Text and Quoted belong to the decoder and line and are valid until the next call, or
// until line changes. An error is DecodeStream's, or an ErrBadField *FrameError when the
// frame names another id.
func (d *StreamDecoder) Decode(line []byte, id string) (StreamText, error) {
	if st, ok := decodeStubStream(line, id, &d.buf); ok {
		if cap(d.buf) > streamKeep {
			d.buf = nil
		}
		return st, nil
	}
	e, err := DecodeStream(line)
	if err != nil {
		return StreamText{}, err
	}
	if e.ID != id {
		return StreamText{}, badField(EventStream, "id", "%q, want %q", e.ID, id)
	}
	return StreamText{Name: e.Name, Text: []byte(e.Text)}, nil
}

// The stub's stream layout: {"event":"stream","id":ID,"name":NAME,"text":TEXT}.
var (
	streamHead = []byte(`{"event":"stream","id":"`)
	streamText = []byte(`","text":`)
)

// stubName follows the id in the stub's stream and job_output layouts.
var stubName = []byte(`","name":"`)

// cutStubHead cuts head, id, `","name":"` and the stream's name off line, a stream or
// job_output line in the stub's layout, and returns the name and the rest. ok is false
// for any other line, and for an id that needs a JSON escape or is not ASCII (the stub
// escapes every other character), so the head's bytes are valid UTF-8.
func cutStubHead(line, head []byte, id string) (name string, rest []byte, ok bool) {
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			return "", nil, false
		}
	}
	rest, ok = bytes.CutPrefix(line, head)
	if !ok || !bytes.HasPrefix(rest, []byte(id)) {
		return "", nil, false
	}
	if rest, ok = bytes.CutPrefix(rest[len(id):], stubName); !ok {
		return "", nil, false
	}
	for _, name := range []string{StreamStdout, StreamStderr} {
		if r, ok := bytes.CutPrefix(rest, []byte(name)); ok {
			return name, r, true
		}
	}
	return "", nil, false
}

// decodeStubStream decodes a stream line of id in exactly the stub's layout into *buf
// (grown as needed). ok is false for any other line, which DecodeStream decides on; when
// ok is true, DecodeStream accepts the line with the same id, name and text. The layout
// leaves no room for other keys or whitespace (see cutStubHead); the line must be ASCII
// (the stub escapes every other character), so it is valid UTF-8.
func decodeStubStream(line []byte, id string, buf *[]byte) (StreamText, bool) {
	name, rest, ok := cutStubHead(line, streamHead, id)
	if !ok {
		return StreamText{}, false
	}
	if rest, ok = bytes.CutPrefix(rest, streamText); !ok {
		return StreamText{}, false
	}
	quoted, ok := bytes.CutSuffix(rest, []byte{'}'})
	if !ok || len(quoted) < 2 || quoted[0] != '"' || quoted[len(quoted)-1] != '"' {
		return StreamText{}, false
	}
	text, clean, ok := jsonstr.UnquoteASCII(quoted[1:len(quoted)-1], buf)
	if !ok {
		return StreamText{}, false
	}
	st := StreamText{Name: name, Text: text}
	if clean {
		st.Quoted = quoted
	}
	return st, true
}
