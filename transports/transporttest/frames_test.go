package transporttest

import (
	"bufio"
	"strings"
	"testing"
)

func TestParseFrameChecksTheProtocolsForm(t *testing.T) {
	good := []string{
		`{"event":"hello","id":"","protocol":1}`,
		`{"event":"done","id":"c1","status":"ok","result":"2","error":null}`,
		`{"event": "stream" , "id" : "c2", "name":"stdout","text":"x"}`,
	}
	for _, s := range good {
		if _, err := parseFrame([]byte(s + "\n")); err != nil {
			t.Errorf("parseFrame(%s): %v", s, err)
		}
	}
	bad := []string{
		``, `[]`, `"x"`, `{}`, `{"id":"","event":"hello"}`, `{"event":"hello"}`,
		`{"event":"hello","protocol":1,"id":""}`, `{"event":"hello","id":3}`,
		`{"event":"hello","id":""`, `{"event":"hello","id":""}x`, `{"type":"execute","id":"c1"}`,
	}
	for _, s := range bad {
		if _, err := parseFrame([]byte(s + "\n")); err == nil {
			t.Errorf("parseFrame(%s) accepted a frame the protocol forbids", s)
		}
	}
}

func TestReadLineBoundsAndCuts(t *testing.T) {
	br := bufio.NewReaderSize(strings.NewReader("a\nbc"), 16)
	if l, err := readLine(br); err != nil || string(l) != "a\n" {
		t.Fatalf("first line %q, %v", l, err)
	}
	if _, err := readLine(br); err == nil {
		t.Fatal("a line cut by EOF was accepted")
	}
	long := strings.Repeat("x", lineLimit+1) + "\n"
	if _, err := readLine(bufio.NewReaderSize(strings.NewReader(long), 64<<10)); err == nil {
		t.Fatal("a line over the limit was accepted")
	}
}

func FuzzParseFrame(f *testing.F) {
	f.Add([]byte(`{"event":"hello","id":"","protocol":1}` + "\n"))
	f.Add([]byte(`{"event":"x","id":"1","a":{"b":[1,2,{}]}}`))
	f.Add([]byte(`{"id":"","event":"hello"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := parseFrame(b)
		if err != nil {
			return
		}
		keys, err := firstKeys(b, 2)
		if err != nil || keys[0] != "event" || keys[1] != "id" {
			t.Fatalf("accepted %q with keys %q, %v", b, keys, err)
		}
		if _, ok := fr.Fields["id"].(string); !ok {
			t.Fatalf("accepted %q with a non-string id", b)
		}
	})
}
