package protocol

import (
	"bytes"

	asmbase64 "github.com/segmentio/asm/base64"
)

// JobOutputDecoder decodes the job_output frames of one kernel's jobs into one reused
// buffer, for the host's hot path. A line in exactly the stub's layout
// (`{"event":"job_output","id":ID,"name":NAME,"data":B64}`, no whitespace) is decoded
// without encoding/json, its base64 by github.com/segmentio/asm/base64 (AVX2, strict like
// DecodeJobOutput's); any other line goes through DecodeJobOutput. Both paths give the
// same bytes and refuse the same lines (a fuzz test holds them to it). The zero value is
// ready to use; a decoder is for one goroutine at a time.
type JobOutputDecoder struct {
	buf []byte // the fast path's output, kept for the next frame up to jobOutputKeep
}

// jobOutputKeep is the largest buffer a JobOutputDecoder keeps between frames: a larger
// frame decodes into a buffer of its own, dropped with it.
const jobOutputKeep = 4 << 20

// Decode returns the data of line, a job_output frame that must name job id (the id the
// gate read from it). The bytes belong to the decoder and are valid until the next call.
// An error is DecodeJobOutput's, or an ErrBadField *FrameError when the frame names
// another job.
func (d *JobOutputDecoder) Decode(line []byte, id string) ([]byte, error) {
	if data, ok := decodeStubJobOutput(line, id, &d.buf); ok {
		if cap(d.buf) > jobOutputKeep {
			d.buf = nil
		}
		return data, nil
	}
	e, err := DecodeJobOutput(line)
	if err != nil {
		return nil, err
	}
	if e.ID != id {
		return nil, badField(EventJobOutput, "id", "%q, want %q", e.ID, id)
	}
	return e.Data, nil
}

// The stub's job_output layout: {"event":"job_output","id":ID,"name":NAME,"data":B64}.
var (
	jobOutputHead = []byte(`{"event":"job_output","id":"`)
	jobOutputData = []byte(`","data":"`)
	jobOutputTail = []byte(`"}`)
)

// decodeStubJobOutput decodes a job_output line of job id in exactly the stub's layout,
// with the data as standard padded base64, into *buf (grown as needed), and returns the
// bytes. ok is false for any other line, which DecodeJobOutput decides on; when ok is
// true, DecodeJobOutput accepts the line with the same id and bytes. The layout leaves no
// room for escapes, other keys or whitespace (see cutStubHead), and a base64 body holds
// no quote or backslash (nor CR or LF, which base64 decoders skip but JSON refuses raw in
// a string).
func decodeStubJobOutput(line []byte, id string, buf *[]byte) ([]byte, bool) {
	_, rest, ok := cutStubHead(line, jobOutputHead, id)
	if !ok {
		return nil, false
	}
	if rest, ok = bytes.CutPrefix(rest, jobOutputData); !ok {
		return nil, false
	}
	body, ok := bytes.CutSuffix(rest, jobOutputTail)
	// Base64 decoders skip CR and LF, which a JSON string cannot hold raw.
	if !ok || bytes.IndexByte(body, '\r') >= 0 || bytes.IndexByte(body, '\n') >= 0 {
		return nil, false
	}
	enc := asmbase64.StdEncoding.Strict()
	if n := enc.DecodedLen(len(body)); cap(*buf) < n {
		*buf = make([]byte, n)
	}
	n, err := enc.Decode((*buf)[:cap(*buf)], body)
	if err != nil {
		return nil, false
	}
	return (*buf)[:n], true
}
