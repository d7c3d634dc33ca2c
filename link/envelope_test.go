package link

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestEnvelopeLines(t *testing.T) {
	for _, tc := range []struct {
		e    Envelope
		line string
	}{
		{Envelope{Seq: 1, Ack: 0, Frame: []byte(`{"event":"stream","id":"c1"}`)}, `{"seq":1,"ack":0,"frame":{"event":"stream","id":"c1"}}` + "\n"},
		{Envelope{Ack: 7}, `{"ack":7}` + "\n"},
	} {
		if got := string(tc.e.Append(nil)); got != tc.line {
			t.Errorf("Append = %q, want %q", got, tc.line)
		}
		got, err := Decode([]byte(tc.line))
		if err != nil || got.Seq != tc.e.Seq || got.Ack != tc.e.Ack || !bytes.Equal(got.Frame, tc.e.Frame) {
			t.Errorf("Decode(%q) = %+v, %v", tc.line, got, err)
		}
	}
}

// TestNotEnvelopes: every other form is ErrNotEnvelope (a ProtocolFault).
func TestNotEnvelopes(t *testing.T) {
	for _, line := range []string{
		``, `{}`, `{"event":"hello","id":""}`, `{"seq":0,"ack":0,"frame":{}}`, `{"seq":01,"ack":0,"frame":{}}`,
		`{"seq":1,"ack":-1,"frame":{}}`, `{"seq":1,"frame":{},"ack":0}`, `{"seq":1,"ack":0,"frame":[1]}`,
		`{"seq":1,"ack":0,"frame":"x"}`, `{"seq":1,"ack":0,"frame":{}`, `{"seq":1, "ack":0,"frame":{}}`,
		`{"ack":1,"seq":2}`, `{"ack":1.5}`, `{"ack":9007199254740992}`, `{"seq":99999999999999999,"ack":0,"frame":{}}`,
		`{"ack":1}{"ack":2}`, `{"seq":1,"ack":0,"frame":{}}x`,
	} {
		if _, err := Decode([]byte(line)); !errors.Is(err, ErrNotEnvelope) {
			t.Errorf("Decode(%q) = %v, want ErrNotEnvelope", line, err)
		}
	}
	if _, err := Decode([]byte(`{"seq":1,"ack":0,"frame":{"x":"` + strings.Repeat("a", MaxLine) + `"}}`)); !errors.Is(err, ErrNotEnvelope) {
		t.Errorf("an envelope over the line limit: %v", err)
	}
}

// TestPropEnvelopeRoundTrip: Decode(Append(e)) is e, for any seq, ack and object frame.
func TestPropEnvelopeRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e := Envelope{Ack: rapid.Uint64Range(0, maxSeq).Draw(t, "ack")}
		if rapid.Bool().Draw(t, "framed") {
			e.Seq = rapid.Uint64Range(1, maxSeq).Draw(t, "seq")
			e.Frame = []byte(`{"event":"stream","id":"` + rapid.StringMatching(`[a-z0-9}{"\\]*`).Draw(t, "id") + `"}`)
		}
		got, err := Decode(e.Append(nil))
		if err != nil || got.Seq != e.Seq || got.Ack != e.Ack || !bytes.Equal(got.Frame, e.Frame) || got.Bare() != e.Bare() {
			t.Fatalf("round trip of %+v: %+v, %v", e, got, err)
		}
	})
}

// FuzzDecode: Decode never panics, and what it accepts is canonical: encoding the result
// gives the line back.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"seq":1,"ack":0,"frame":{"event":"done","id":"c1"}}`))
	f.Add([]byte(`{"ack":12}`))
	f.Add([]byte(`{"seq":3,"ack":2,"frame":{}}` + "\n"))
	f.Fuzz(func(t *testing.T, line []byte) {
		e, err := Decode(line)
		if err != nil {
			if !errors.Is(err, ErrNotEnvelope) {
				t.Fatalf("error %v is not ErrNotEnvelope", err)
			}
			return
		}
		want := bytes.TrimSuffix(line, []byte("\n"))
		if got := bytes.TrimSuffix(e.Append(nil), []byte("\n")); !bytes.Equal(got, want) {
			t.Fatalf("Decode(%q) = %+v, which encodes as %q", line, e, got)
		}
	})
}
