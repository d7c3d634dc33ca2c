package transporttest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"
)

// lineLimit is the protocol's frame limit, newline included.
const lineLimit = 32 << 20

// frame is one line the kernel wrote, decoded.
type frame struct {
	raw    []byte
	fields map[string]any
}

func (f frame) str(key string) string {
	s, _ := f.fields[key].(string)
	return s
}

func (f frame) event() string { return f.str("event") }
func (f frame) id() string    { return f.str("id") }

// reader delivers the kernel's frames on a channel, checking each one's form on the way:
// a JSON object whose first keys are "event" and "id", the id a string.
type reader struct {
	frames chan frame
	errc   chan error // one value once the stream ends: nil at EOF
}

func newReader(r io.Reader) *reader {
	rd := &reader{frames: make(chan frame, 64), errc: make(chan error, 1)}
	go func() {
		defer close(rd.frames)
		br := bufio.NewReaderSize(r, 64<<10)
		for {
			line, err := readLine(br)
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				rd.errc <- err
				return
			}
			f, err := parseFrame(line)
			if err != nil {
				rd.errc <- err
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
func parseFrame(line []byte) (frame, error) {
	keys, err := firstKeys(line, 2)
	if err != nil {
		return frame{}, fmt.Errorf("frame %.200q: %w", line, err)
	}
	if len(keys) < 2 || keys[0] != "event" || keys[1] != "id" {
		return frame{}, fmt.Errorf("frame %.200q: keys start %q, want event, id", line, keys)
	}
	f := frame{raw: line}
	if err := json.Unmarshal(line, &f.fields); err != nil {
		return frame{}, fmt.Errorf("frame %.200q: %w", line, err)
	}
	if _, ok := f.fields["id"].(string); !ok {
		return frame{}, fmt.Errorf("frame %.200q: id is not a string", line)
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

// next returns the next frame, failing the test at the end of the stream or after d.
func (rd *reader) next(t testing.TB, d time.Duration) frame {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case f, ok := <-rd.frames:
		if !ok {
			t.Fatalf("kernel stdout ended (%v) while a frame was expected", <-rd.errc)
		}
		return f
	case <-timer.C:
		t.Fatalf("no frame within %v", d)
	}
	return frame{}
}

// end waits for the end of the stream, failing the test if it is not a clean EOF within d.
// Frames still in flight are discarded.
func (rd *reader) end(t testing.TB, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-rd.frames:
			if ok {
				continue
			}
			if err := <-rd.errc; err != nil {
				t.Fatalf("kernel stdout ended with %v", err)
			}
			rd.errc <- nil
			return
		case <-timer.C:
			t.Fatalf("kernel stdout did not reach EOF within %v", d)
		}
	}
}

// hostFrame is a frame the host writes: "type" first, then "id".
type hostFrame struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	Code string `json:"code,omitempty"`
}

func writeFrame(w io.Writer, f hostFrame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
