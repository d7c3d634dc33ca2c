package transporttest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// lineLimit is the protocol's frame limit, newline included.
const lineLimit = 32 << 20

// Frame is one line a kernel wrote, decoded. Its form is checked: a JSON object whose
// first keys are "event" and "id", the id a string.
type Frame struct {
	// Raw is the line as the kernel wrote it, newline included.
	Raw []byte
	// Fields is the decoded object; numbers are float64, as encoding/json decodes them.
	Fields map[string]any
}

// Str returns the string field key, or "" when it is missing or not a string.
func (f Frame) Str(key string) string {
	s, _ := f.Fields[key].(string)
	return s
}

// Event returns the frame's "event".
func (f Frame) Event() string { return f.Str("event") }

// ID returns the frame's "id": the id of the host frame it answers, "" for none.
func (f Frame) ID() string { return f.Str("id") }

// reader delivers the kernel's frames on a channel, checking each one's form on the way.
type reader struct {
	frames chan Frame
	// err says why the stream ended: nil at EOF. It is set before frames is closed, and
	// read only once a receive found frames closed.
	err error
}

func newReader(r io.Reader) *reader {
	rd := &reader{frames: make(chan Frame, 256)}
	go func() {
		defer close(rd.frames)
		br := bufio.NewReaderSize(r, 64<<10)
		for {
			line, err := readLine(br)
			if err != nil {
				if !errors.Is(err, io.EOF) {
					rd.err = err
				}
				return
			}
			f, err := parseFrame(line)
			if err != nil {
				rd.err = err
				// Keep draining so the kernel is never blocked on a full pipe.
				_, _ = io.Copy(io.Discard, br)
				return
			}
			rd.frames <- f
		}
	}()
	return rd
}

func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > lineLimit {
			return nil, fmt.Errorf("frame over %d bytes", lineLimit)
		}
		if err == nil {
			return line, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if len(line) > 0 && errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("frame cut at EOF: %.200q", line)
			}
			return nil, err
		}
	}
}

// parseFrame decodes one line and checks the protocol's form.
func parseFrame(line []byte) (Frame, error) {
	keys, err := firstKeys(line, 2)
	if err != nil {
		return Frame{}, fmt.Errorf("frame %.200q: %w", line, err)
	}
	if len(keys) < 2 || keys[0] != "event" || keys[1] != "id" {
		return Frame{}, fmt.Errorf("frame %.200q: keys start %q, want event, id", line, keys)
	}
	f := Frame{Raw: line}
	if err := json.Unmarshal(line, &f.Fields); err != nil {
		return Frame{}, fmt.Errorf("frame %.200q: %w", line, err)
	}
	if _, ok := f.Fields["id"].(string); !ok {
		return Frame{}, fmt.Errorf("frame %.200q: id is not a string", line)
	}
	return f, nil
}

// firstKeys returns the first n keys of the JSON object in b, in order.
func firstKeys(b []byte, n int) ([]string, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object")
	}
	var keys []string
	for len(keys) < n && d.More() {
		tok, err := d.Token()
		if err != nil {
			return nil, err
		}
		k, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("key %v is not a string", tok)
		}
		keys = append(keys, k)
		var skip json.RawMessage
		if err := d.Decode(&skip); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// next returns the next frame, or an error at the end of the stream or after d.
func (rd *reader) next(d time.Duration) (Frame, error) {
	select {
	case f, ok := <-rd.frames:
		if !ok {
			if rd.err != nil {
				return Frame{}, fmt.Errorf("kernel stdout ended (%w) while a frame was expected", rd.err)
			}
			return Frame{}, errors.New("kernel stdout ended while a frame was expected")
		}
		return f, nil
	case <-time.After(d):
		return Frame{}, fmt.Errorf("no frame within %v", d)
	}
}

// end discards frames until the stream ends; it returns nil for a clean EOF within d.
func (rd *reader) end(d time.Duration) error {
	timeout := time.After(d)
	for {
		select {
		case _, ok := <-rd.frames:
			if !ok {
				if rd.err != nil {
					return fmt.Errorf("kernel stdout ended with %w", rd.err)
				}
				return nil
			}
		case <-timeout:
			return fmt.Errorf("kernel stdout did not reach EOF within %v", d)
		}
	}
}

// hostFrame is a frame the host writes: "type" first, then "id".
type hostFrame struct {
	Type    string `json:"type"`
	ID      string `json:"id"`
	Code    string `json:"code,omitempty"`
	Command string `json:"command,omitempty"`
}
