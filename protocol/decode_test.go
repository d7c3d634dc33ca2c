package protocol

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

const bundle = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func ptr[T any](v T) *T { return &v }

func TestDecodeEventReadsEveryEvent(t *testing.T) {
	tests := []struct {
		line string
		want Event
	}{
		{`{"event":"hello","id":"","protocol":1,"pid":42,"pgid":42,"python":"3.11.7","bundle":"` + bundle + `"}`,
			Hello{Protocol: 1, PID: 42, PGID: 42, Python: "3.11.7", Bundle: bundle}},
		{`{"event": "stream", "id": "c1", "name": "stdout", "text": "42\n\u00e9"}` + "\n",
			Stream{ID: "c1", Name: "stdout", Text: "42\né"}},
		{`{"event":"display","id":"c1","data":{"text/plain":"x","image/png":"iVBO"}}`,
			Display{ID: "c1", Data: json.RawMessage(`{"text/plain":"x","image/png":"iVBO"}`)}},
		{`{"event":"done","id":"c1","status":"ok","result":"42","error":null}`,
			Done{ID: "c1", Status: DoneOK, Result: ptr("42")}},
		{`{"event":"done","id":"c2","status":"error","result":null,"error":{"ename":"ZeroDivisionError","evalue":"division by zero","traceback":["a","b"]}}`,
			Done{ID: "c2", Status: DoneError, Error: &CellError{EName: "ZeroDivisionError", EValue: "division by zero", Traceback: "a\nb"}}},
		{`{"event":"done","id":"c3","status":"interrupted","result":null,"error":{"ename":"KeyboardInterrupt","evalue":"","traceback":"tb"}}`,
			Done{ID: "c3", Status: DoneInterrupted, Error: &CellError{EName: "KeyboardInterrupt", Traceback: "tb"}}},
		{`{"event":"host_request","id":"h7","type":"fs.read","cell":"c3","args":{"path":"/w/a"}}`,
			HostRequest{ID: "h7", Type: "fs.read", Cell: "c3", Args: json.RawMessage(`{"path":"/w/a"}`)}},
		{`{"event":"host_request","id":"h8","type":"rlm.list","cell":"c3"}`,
			HostRequest{ID: "h8", Type: "rlm.list", Cell: "c3"}},
		{`{"event":"job_start","id":"j1","pid":100,"pgid":100,"command":"sleep 1"}`,
			JobStart{ID: "j1", PID: 100, PGID: 100, Command: "sleep 1"}},
		{`{"event":"job_output","id":"j1","name":"stderr","data":"` + base64.StdEncoding.EncodeToString([]byte("\xff\x00ok")) + `"}`,
			JobOutput{ID: "j1", Name: "stderr", Data: []byte("\xff\x00ok")}},
		{`{"event":"job_end","id":"j1","exit_code":3,"signal":null}`, JobEnd{ID: "j1", ExitCode: ptr(3)}},
		{`{"event":"job_end","id":"j1","exit_code":null,"signal":9}`, JobEnd{ID: "j1", Signal: ptr(9)}},
		{`{"event":"log","id":"","level":"warning","message":"slow","extra":[1]}`, Log{Level: LevelWarning, Message: "slow"}},
	}
	for _, tt := range tests {
		got, err := DecodeEvent([]byte(tt.line))
		if err != nil {
			t.Errorf("%s: %v", tt.line, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s:\n got %#v\nwant %#v", tt.line, got, tt.want)
		}
		if got.EventName() != tt.want.EventName() {
			t.Errorf("%s: EventName %q", tt.line, got.EventName())
		}
		// The typed decoder agrees, and refuses every other event.
		for name, dec := range typedDecoders {
			v, err := dec([]byte(tt.line))
			if name == tt.want.EventName() {
				if err != nil || !reflect.DeepEqual(v, tt.want) {
					t.Errorf("Decode %s(%s) = %#v, %v", name, tt.line, v, err)
				}
			} else if !errors.Is(err, ErrWrongEvent) {
				t.Errorf("Decode %s(%s): err = %v, want ErrWrongEvent", name, tt.line, err)
			}
		}
	}
}

var typedDecoders = map[string]func([]byte) (Event, error){
	EventHello:       func(b []byte) (Event, error) { return event(DecodeHello(b)) },
	EventStream:      func(b []byte) (Event, error) { return event(DecodeStream(b)) },
	EventDisplay:     func(b []byte) (Event, error) { return event(DecodeDisplay(b)) },
	EventDone:        func(b []byte) (Event, error) { return event(DecodeDone(b)) },
	EventHostRequest: func(b []byte) (Event, error) { return event(DecodeHostRequest(b)) },
	EventJobStart:    func(b []byte) (Event, error) { return event(DecodeJobStart(b)) },
	EventJobOutput:   func(b []byte) (Event, error) { return event(DecodeJobOutput(b)) },
	EventJobEnd:      func(b []byte) (Event, error) { return event(DecodeJobEnd(b)) },
	EventLog:         func(b []byte) (Event, error) { return event(DecodeLog(b)) },
}

func TestDecodeEventRefusesBadInput(t *testing.T) {
	tests := []struct {
		line  string
		class error
		field string
	}{
		{"", ErrMalformed, ""},
		{"\xff", ErrMalformed, ""},
		{`{"event":"log","id":"","level":"info","message":"\xff"}`, ErrMalformed, ""},
		{`[{"event":"log"}]`, ErrMalformed, ""},
		{`{"event":"log",}`, ErrMalformed, ""},
		{`{"event":"log","id":""} {}`, ErrMalformed, ""},
		{`{"event":"log","id":"","event":"stream"}`, ErrMalformed, ""},
		{`{"id":"x"}`, ErrBadField, "event"},
		{`{"event":7,"id":"x"}`, ErrBadField, "event"},
		{`{"event":"nope","id":"x"}`, ErrWrongEvent, "event"},
		{`{"event":"stream","name":"stdout","text":""}`, ErrBadField, "id"},
		{`{"event":"stream","id":null,"name":"stdout","text":""}`, ErrBadField, "id"},
		{`{"event":"stream","id":"c","name":"stdin","text":""}`, ErrBadField, "name"},
		{`{"event":"stream","id":"c","name":"stdout"}`, ErrBadField, "text"},
		{`{"event":"display","id":"c","data":"x"}`, ErrBadField, "data"},
		{`{"event":"hello","id":"","protocol":"1","pid":1,"pgid":1,"python":"3","bundle":"` + bundle + `"}`, ErrBadField, "protocol"},
		{`{"event":"hello","id":"","protocol":1.5,"pid":1,"pgid":1,"python":"3","bundle":"` + bundle + `"}`, ErrBadField, "protocol"},
		{`{"event":"hello","id":"","protocol":1,"pid":0,"pgid":1,"python":"3","bundle":"` + bundle + `"}`, ErrBadField, "pid"},
		{`{"event":"hello","id":"","protocol":1,"pid":1,"pgid":1,"python":"3","bundle":"XYZ"}`, ErrBadField, "bundle"},
		{`{"event":"done","id":"c","status":"fine","result":null,"error":null}`, ErrBadField, "status"},
		{`{"event":"done","id":"c","status":"ok","result":3,"error":null}`, ErrBadField, "result"},
		{`{"event":"done","id":"c","status":"ok","result":null}`, ErrBadField, "error"},
		{`{"event":"done","id":"c","status":"error","result":null,"error":null}`, ErrBadField, "error"},
		{`{"event":"done","id":"c","status":"ok","result":null,"error":{"ename":"E","evalue":"","traceback":""}}`, ErrBadField, "error"},
		{`{"event":"done","id":"c","status":"error","result":null,"error":{"ename":"E","evalue":""}}`, ErrBadField, "traceback"},
		{`{"event":"done","id":"c","status":"error","result":null,"error":{"ename":"E","evalue":"","traceback":[1]}}`, ErrBadField, "traceback"},
		{`{"event":"done","id":"c","status":"error","result":null,"error":[]}`, ErrBadField, "error"},
		{`{"event":"host_request","id":"h","cell":"c","args":{}}`, ErrBadField, "type"},
		{`{"event":"host_request","id":"h","type":"fs.read","cell":"c","args":[1]}`, ErrBadField, "args"},
		{`{"event":"host_request","id":"h","type":"fs.read","cell":"c","args":null}`, ErrBadField, "args"},
		{`{"event":"job_start","id":"j","pid":-1,"pgid":1,"command":""}`, ErrBadField, "pid"},
		{`{"event":"job_output","id":"j","name":"stdout","data":"!!"}`, ErrBadField, "data"},
		{`{"event":"job_output","id":"j","name":"stdout","data":"QQ"}`, ErrBadField, "data"},
		{`{"event":"job_end","id":"j","exit_code":0,"signal":9}`, ErrBadField, "signal"},
		{`{"event":"job_end","id":"j","exit_code":null,"signal":0}`, ErrBadField, "signal"},
		{`{"event":"job_end","id":"j","exit_code":1e2,"signal":null}`, ErrBadField, "exit_code"},
		{`{"event":"job_end","id":"j","signal":null}`, ErrBadField, "exit_code"},
		{`{"event":"log","id":"","level":"loud","message":""}`, ErrBadField, "level"},
	}
	for _, tt := range tests {
		ev, err := DecodeEvent([]byte(tt.line))
		var fe *FrameError
		if !errors.As(err, &fe) || !errors.Is(err, tt.class) {
			t.Errorf("%s: err = %v, want a %v *FrameError", tt.line, err, tt.class)
			continue
		}
		if ev != nil {
			t.Errorf("%s: event %#v with an error", tt.line, ev)
		}
		if fe.Field != tt.field {
			t.Errorf("%s: field %q, want %q (%v)", tt.line, fe.Field, tt.field, err)
		}
	}
}

func TestHelloCheckVersion(t *testing.T) {
	if err := (Hello{Protocol: Version}).CheckVersion(); err != nil {
		t.Fatal(err)
	}
	err := Hello{Protocol: 2}.CheckVersion()
	var fe *FrameError
	if !errors.Is(err, ErrVersion) || !errors.As(err, &fe) || fe.Field != "protocol" {
		t.Fatalf("err = %v, want ErrVersion on protocol", err)
	}
}

// TestDecodeMatchesEncodingJSON: whatever values a kernel encodes with a standard JSON
// encoder, the decoders read back exactly those values.
func TestDecodeMatchesEncodingJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		id := rapid.String().Draw(t, "id")
		text := rapid.String().Draw(t, "text")
		data := rapid.SliceOf(rapid.Byte()).Draw(t, "data")
		code := rapid.IntRange(-300, 300).Draw(t, "code")
		name := rapid.SampledFrom([]string{StreamStdout, StreamStderr}).Draw(t, "name")
		cases := []struct {
			m    map[string]any
			want Event
		}{
			{map[string]any{"event": "stream", "id": id, "name": name, "text": text}, Stream{ID: id, Name: name, Text: text}},
			{map[string]any{"event": "job_output", "id": id, "name": name, "data": base64.StdEncoding.EncodeToString(data)},
				JobOutput{ID: id, Name: name, Data: append([]byte{}, data...)}},
			{map[string]any{"event": "job_end", "id": id, "exit_code": code, "signal": nil}, JobEnd{ID: id, ExitCode: &code}},
			{map[string]any{"event": "done", "id": id, "status": "ok", "result": text, "error": nil}, Done{ID: id, Status: "ok", Result: &text}},
		}
		for _, c := range cases {
			line, err := json.Marshal(c.m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeEvent(line)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			if jo, ok := got.(JobOutput); ok && len(jo.Data) == 0 {
				jo.Data = []byte{}
				got = jo
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("%s:\n got %#v\nwant %#v", line, got, c.want)
			}
		}
	})
}

// stubJobOutput is a job_output line as the stub writes it (without its newline).
func stubJobOutput(id, name string, data []byte) []byte {
	return []byte(`{"event":"job_output","id":"` + id + `","name":"` + name + `","data":"` + base64.StdEncoding.EncodeToString(data) + `"}`)
}

// checkSameAsDecodeJobOutput states the fast decoder's law on one line: when it decodes a
// line it gives exactly the bytes DecodeJobOutput gives, and that decoder accepts the line
// too, with the same id.
func checkSameAsDecodeJobOutput(t interface{ Fatalf(string, ...any) }, line []byte, id string) (ok bool) {
	var buf []byte
	got, ok := decodeStubJobOutput(line, id, &buf)
	if !ok {
		return false
	}
	want, err := DecodeJobOutput(line)
	if err != nil {
		t.Fatalf("fast path decoded %q, DecodeJobOutput refuses it: %v", line, err)
	}
	if want.ID != id || !bytes.Equal(got, want.Data) {
		t.Fatalf("fast path gave %q for id %q, DecodeJobOutput %q for id %q", got, id, want.Data, want.ID)
	}
	return true
}

func TestFastJobOutputDecodesTheStubsFrames(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		data := rapid.SliceOfN(rapid.Byte(), 0, 1<<12).Draw(t, "data")
		id := "j" + strconv.FormatUint(rapid.Uint64Range(1, 1<<40).Draw(t, "id"), 10)
		name := rapid.SampledFrom([]string{StreamStdout, StreamStderr}).Draw(t, "name")
		if !checkSameAsDecodeJobOutput(t, stubJobOutput(id, name, data), id) {
			t.Fatalf("fast path refused the stub's own layout")
		}
	})
}

func TestFastJobOutputFallsBackOnAnyOtherLayout(t *testing.T) {
	good := string(stubJobOutput("j1", "stdout", []byte("hi\n")))
	if !checkSameAsDecodeJobOutput(t, []byte(strings.Replace(good, `aGkK`, `aGk=`, 1)), "j1") {
		t.Fatal("fast path refused other valid base64 in the stub's layout")
	}
	for _, line := range []string{
		strings.Replace(good, `"name":"stdout"`, `"name":"stdin"`, 1),
		strings.Replace(good, `aGkK`, `aGkK\n`, 1),
		strings.Replace(good, `aGkK`, `aG=K`, 1),
		strings.Replace(good, `aGkK`, `aGl=`, 1), // non-zero padding bits: strict refuses
		strings.Replace(good, `aGkK`, `aGk`, 1),
		strings.Replace(good, `aGkK`, "aG\rkK", 1), // base64 skips CR; JSON refuses it raw (found by FuzzFastJobOutput)
		strings.Replace(good, `"}`, `","data":"AAAA"}`, 1),
		strings.Replace(good, `{"event"`, `{ "event"`, 1),
		strings.Replace(good, `"id":"j1"`, `"id":"j\u0031"`, 1),
		strings.Replace(good, `"name":"stdout",`, `"name":"stdout","x":1,`, 1),
		good + " ",
	} {
		if checkSameAsDecodeJobOutput(t, []byte(line), "j1") {
			t.Errorf("fast path took %s", line)
		}
	}
	if _, ok := decodeStubJobOutput([]byte(good), "j2", new([]byte)); ok {
		t.Error("fast path decoded a frame of another id")
	}
	if _, ok := decodeStubJobOutput([]byte(strings.ReplaceAll(good, "j1", `j"1`)), `j"1`, new([]byte)); ok {
		t.Error("fast path took an id that needs escaping")
	}
}

// TestJobOutputDecoderGivesWhatDecodeJobOutputGives runs one decoder over the stub's
// layout, other valid layouts, bad frames and frames of another job, in any order: each
// answer is DecodeJobOutput's (or its refusal), a frame naming another job is an
// ErrBadField on "id", and the bytes of one call are intact until the next.
func TestJobOutputDecoderGivesWhatDecodeJobOutputGives(t *testing.T) {
	var d JobOutputDecoder
	rapid.Check(t, func(t *rapid.T) {
		data := rapid.SliceOfN(rapid.Byte(), 0, 1<<10).Draw(t, "data")
		id := rapid.SampledFrom([]string{"j1", "j22", `j"3`, "j\u00e94"}).Draw(t, "id")
		name := rapid.SampledFrom([]string{StreamStdout, StreamStderr}).Draw(t, "name")
		b64 := base64.StdEncoding.EncodeToString(data)
		quoted, _ := json.Marshal(id)
		line := rapid.SampledFrom([]string{
			string(stubJobOutput(id, name, data)),
			`{"event":"job_output","id":` + string(quoted) + `,"name":"` + name + `","data":"` + b64 + `"}`,
			`{"data":"` + b64 + `","name":"` + name + `","id":` + string(quoted) + `,"event":"job_output"}`,
			`{"event":"job_output","id":` + string(quoted) + `,"name":"` + name + `","data":"` + b64 + `x"}`,
			`{"event":"job_output","id":` + string(quoted) + `,"name":"stdin","data":"` + b64 + `"}`,
		}).Draw(t, "line")
		askID := id
		if rapid.Bool().Draw(t, "other job") {
			askID = "j9"
		}
		got, err := d.Decode([]byte(line), askID)
		want, werr := DecodeJobOutput([]byte(line))
		switch {
		case werr != nil:
			if err == nil || !errors.Is(err, ErrBadField) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("%s: Decode %q, %v; DecodeJobOutput refuses it: %v", line, got, err, werr)
			}
		case want.ID != askID:
			var fe *FrameError
			if !errors.As(err, &fe) || fe.Field != "id" || !errors.Is(err, ErrBadField) {
				t.Fatalf("%s for job %s: Decode %q, %v; want an ErrBadField on id", line, askID, got, err)
			}
		case err != nil || !bytes.Equal(got, want.Data):
			t.Fatalf("%s: Decode %q, %v; DecodeJobOutput %q", line, got, err, want.Data)
		}
	})
}

// TestJobOutputDecoderKeepsNoLargeBuffer: after a frame larger than it keeps, the
// decoder holds no buffer, and the bytes it gave stay intact.
func TestJobOutputDecoderKeepsNoLargeBuffer(t *testing.T) {
	var d JobOutputDecoder
	small, err := d.Decode(stubJobOutput("j1", "stdout", []byte("hi")), "j1")
	if err != nil || string(small) != "hi" || d.buf == nil {
		t.Fatalf("small frame: %q, %v, buffer kept %v", small, err, d.buf != nil)
	}
	big := bytes.Repeat([]byte{0xa5}, jobOutputKeep+1)
	got, err := d.Decode(stubJobOutput("j1", "stdout", big), "j1")
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("big frame: %d bytes, %v", len(got), err)
	}
	if d.buf != nil {
		t.Fatalf("decoder keeps a buffer of %d bytes after a big frame", cap(d.buf))
	}
}

// BenchmarkJobOutputDecoder decodes a job_output frame of 64 KiB as the stub writes it,
// through JobOutputDecoder and through DecodeJobOutput.
func BenchmarkJobOutputDecoder(b *testing.B) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 4<<10)
	line := stubJobOutput("j1", StreamStdout, data)
	b.Run("JobOutputDecoder", func(b *testing.B) {
		var d JobOutputDecoder
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := d.Decode(line, "j1"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeJobOutput", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := DecodeJobOutput(line); err != nil {
				b.Fatal(err)
			}
		}
	})
}
