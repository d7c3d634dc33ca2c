package protocol

import (
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeEvent: on any bytes the decoders never panic, every error is a *FrameError of
// one class, and a line that decodes is valid UTF-8 and valid JSON.
func FuzzDecodeEvent(f *testing.F) {
	seeds := []string{
		`{"event":"hello","id":"","protocol":1,"pid":42,"pgid":42,"python":"3.11.7","bundle":"` + bundle + `"}`,
		`{"event":"stream","id":"c1","name":"stdout","text":"42\n"}`,
		`{"event":"display","id":"c1","data":{"text/plain":"x"}}`,
		`{"event":"done","id":"c2","status":"error","result":null,"error":{"ename":"E","evalue":"v","traceback":["a"]}}`,
		`{"event":"host_request","id":"h7","type":"fs.read","cell":"c3","args":{"path":"/w/a"}}`,
		`{"event":"job_start","id":"j1","pid":100,"pgid":100,"command":"sleep 1"}`,
		`{"event":"job_output","id":"j1","name":"stderr","data":"/wBvaw=="}`,
		`{"event":"job_end","id":"j1","exit_code":null,"signal":9}`,
		`{"event":"log","id":"","level":"warning","message":"slow"}`,
		`{"event":"log","id":"","event":"log"}`, `[]`, `{`, "\xff",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, err := DecodeEvent(line)
		if err != nil {
			var fe *FrameError
			if !errors.As(err, &fe) {
				t.Fatalf("%q: error %T %v is not a *FrameError", line, err, err)
			}
			n := 0
			for _, c := range []error{ErrMalformed, ErrWrongEvent, ErrBadField} {
				if errors.Is(err, c) {
					n++
				}
			}
			if n != 1 || ev != nil {
				t.Fatalf("%q: %v in %d classes, event %v", line, err, n, ev)
			}
			return
		}
		if !utf8.Valid(line) || !json.Valid(line) {
			t.Fatalf("%q decoded as %#v", line, ev)
		}
		if dec := typedDecoders[ev.EventName()]; dec == nil {
			t.Fatalf("%q: unknown event %q", line, ev.EventName())
		}
	})
}

// FuzzFastJobOutput holds the fast job_output decoder (JobOutputDecoder's path for the
// stub's own layout) to DecodeJobOutput on any line and id.
func FuzzFastJobOutput(f *testing.F) {
	f.Add(stubJobOutput("j1", "stdout", []byte("hello\n")), "j1")
	f.Add(stubJobOutput("j7", "stderr", []byte{0, 0xff, 0xc3}), "j7")
	f.Add(stubJobOutput("j1", "stdout", nil), "j1")
	f.Add([]byte(`{"event":"job_output","id":"j1","name":"stdout","data":"aGk="}`), "j1")
	f.Add([]byte(`{"event":"job_output","id":"j1","name":"stdout","data":"a\"Gk="}`), "j1")
	f.Fuzz(func(t *testing.T, line []byte, id string) {
		checkSameAsDecodeJobOutput(t, line, id)
	})
}

// FuzzFastStream holds the fast stream decoder (StreamDecoder's path for the stub's own
// layout) to DecodeStream on any line and id.
func FuzzFastStream(f *testing.F) {
	f.Add(stubStream("c1", "stdout", "hello\n"), "c1")
	f.Add(stubStream("c7", "stderr", "\x00é中\U0001f600\"\\/"), "c7")
	f.Add(stubStream("", "stdout", ""), "")
	f.Add([]byte(`{"event":"stream","id":"c1","name":"stdout","text":"\ud800\udc00\ud800x\u00e9"}`), "c1")
	f.Add([]byte(`{"event":"stream","id":"c1","name":"stdout","text":"a\"b"}`), "c1")
	f.Fuzz(func(t *testing.T, line []byte, id string) {
		checkSameAsDecodeStream(t, line, id)
	})
}
