package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestHostFramesEncodeExactly(t *testing.T) {
	tests := []struct {
		f    HostFrame
		want string
	}{
		{Execute{ID: "c1", Code: "print(\"hi\")\n6*7"}, `{"type":"execute","id":"c1","code":"print(\"hi\")\n6*7"}`},
		{Interrupt{ID: "c1"}, `{"type":"interrupt","id":"c1"}`},
		{HostReply{ID: "h7", Status: StatusOK, Result: json.RawMessage(" {\"a\": [1, 2]}\n")}, `{"type":"host_reply","id":"h7","status":"ok","result":{"a":[1,2]}}`},
		{HostReply{ID: "h7", Status: StatusOK}, `{"type":"host_reply","id":"h7","status":"ok","result":null}`},
		{HostReply{ID: "h8", Status: StatusError, Error: &ReplyError{Code: CodeOutside, Message: "no mount holds /etc", Reason: "outside", Version: "transport@1"}},
			`{"type":"host_reply","id":"h8","status":"error","error":{"code":"outside","message":"no mount holds /etc","reason":"outside","version":"transport@1"}}`},
		{HostReply{ID: "h9", Status: StatusDuplicate, Error: &ReplyError{Code: CodeDuplicate, Message: "id in use"}},
			`{"type":"host_reply","id":"h9","status":"duplicate","error":{"code":"duplicate","message":"id in use"}}`},
		{JobRun{ID: "j1", Command: "sleep 1 && echo <done>"}, `{"type":"job_run","id":"j1","command":"sleep 1 && echo <done>"}`},
		{JobKill{ID: "j1"}, `{"type":"job_kill","id":"j1"}`},
		{JobKill{ID: "j1", Signal: 9}, `{"type":"job_kill","id":"j1","signal":9}`},
		{Shutdown{}, `{"type":"shutdown","id":""}`},
		{Execute{ID: "\x00\t\u2028é", Code: "\xff"}, `{"type":"execute","id":"\u0000\t` + "\u2028é" + `","code":"` + "\ufffd" + `"}`},
	}
	for _, tt := range tests {
		got, err := MarshalLine(tt.f)
		if err != nil {
			t.Errorf("%#v: %v", tt.f, err)
			continue
		}
		if string(got) != tt.want+"\n" {
			t.Errorf("%#v:\n got %s\nwant %s", tt.f, got, tt.want)
		}
		pre := []byte("prefix")
		app, err := tt.f.AppendLine(pre)
		if err != nil || string(app) != "prefix"+tt.want+"\n" {
			t.Errorf("%#v.AppendLine = %q, %v", tt.f, app, err)
		}
	}
}

func TestHostReplyRefusesBadInput(t *testing.T) {
	bad := []HostReply{
		{ID: "a", Status: "maybe"},
		{ID: "a", Status: StatusOK, Error: &ReplyError{Code: CodeInternal}},
		{ID: "a", Status: StatusError},
		{ID: "a", Status: StatusDuplicate},
		{ID: "a", Status: StatusError, Error: &ReplyError{Code: "nope"}},
		{ID: "a", Status: StatusError, Error: &ReplyError{Code: CodeInternal}, Result: json.RawMessage("1")},
		{ID: "a", Status: StatusOK, Result: json.RawMessage("{")},
		{ID: "a", Status: StatusOK, Result: json.RawMessage("1 2")},
		{ID: "a", Status: StatusOK, Result: json.RawMessage(`"\xff"`)},
	}
	for _, f := range bad {
		dst := []byte("keep")
		got, err := f.AppendLine(dst)
		var fe *FrameError
		if !errors.As(err, &fe) || !errors.Is(err, ErrBadField) || fe.Frame != TypeHostReply {
			t.Errorf("%+v: err = %v, want a host_reply ErrBadField *FrameError", f, err)
		}
		if string(got) != "keep" {
			t.Errorf("%+v: dst changed to %q", f, got)
		}
	}
	for _, sig := range []int{-1, 65} {
		if _, err := MarshalLine(JobKill{ID: "j", Signal: sig}); !errors.Is(err, ErrBadField) {
			t.Errorf("JobKill signal %d: err = %v, want ErrBadField", sig, err)
		}
	}
}

// normalize is what a JSON encoder must make of s: each byte of invalid UTF-8 becomes
// U+FFFD, as converting through []rune does.
func normalize(s string) string { return string([]rune(s)) }

// TestHostFramesRoundTrip: for any strings, every host frame is one line, valid JSON
// with type then id first, and decodes (with encoding/json) to the values encoded.
func TestHostFramesRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		str := rapid.OneOf(rapid.String(), rapid.StringOf(rapid.RuneFrom(nil, &unicodeAll)),
			rapid.Map(rapid.SliceOf(rapid.Byte()), func(b []byte) string { return string(b) }))
		id, code := str.Draw(t, "id"), str.Draw(t, "code")
		frames := []HostFrame{
			Execute{ID: id, Code: code}, Interrupt{ID: id}, JobRun{ID: id, Command: code},
			JobKill{ID: id, Signal: rapid.IntRange(0, 64).Draw(t, "sig")},
			HostReply{ID: id, Status: StatusError, Error: &ReplyError{Code: CodeNotFound, Message: code, Reason: code}},
		}
		for _, f := range frames {
			line, err := MarshalLine(f)
			if err != nil {
				t.Fatalf("%#v: %v", f, err)
			}
			if bytes.IndexByte(line, '\n') != len(line)-1 {
				t.Fatalf("%#v: not one line: %q", f, line)
			}
			if !json.Valid(line) {
				t.Fatalf("%#v: invalid JSON %q", f, line)
			}
			head, _ := json.Marshal(f.FrameType())
			if !bytes.HasPrefix(line, []byte(`{"type":`+string(head)+`,"id":`)) {
				t.Fatalf("%#v: type and id not first: %q", f, line)
			}
			var m map[string]any
			if err := json.Unmarshal(line, &m); err != nil {
				t.Fatal(err)
			}
			if m["id"] != normalize(id) {
				t.Fatalf("id %q decoded as %q", id, m["id"])
			}
			for _, k := range []string{"code", "command"} {
				if v, ok := m[k]; ok && v != normalize(code) {
					t.Fatalf("%s %q decoded as %q", k, code, v)
				}
			}
		}
	})
}

var unicodeAll = unicodeAllTable()

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a", "\"\\", "\x00\x1f\x7f", "\xff\xfe", "é\u2028\U0001F600", "\xed\xa0\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := appendString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q -> %q: %v", s, b, err)
		}
		if got != normalize(s) {
			t.Fatalf("%q -> %q -> %q", s, b, got)
		}
		if bytes.IndexByte(b, '\n') >= 0 || !strings.HasPrefix(string(b), `"`) {
			t.Fatalf("%q -> %q", s, b)
		}
	})
}
