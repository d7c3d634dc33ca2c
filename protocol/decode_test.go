package protocol

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
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
