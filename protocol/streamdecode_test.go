package protocol

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// stubStream is a stream line as the stub writes it (without its newline): the text
// escaped as Python's json.encoder.encode_basestring_ascii does.
func stubStream(id, name, text string) []byte {
	return []byte(`{"event":"stream","id":"` + id + `","name":"` + name + `","text":` + pyQuote(text) + `}`)
}

// pyQuote is Python's encode_basestring_ascii over text given as UTF-16 code units
// (so a lone surrogate, which a Python str may hold, can be written).
func pyQuote(text string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range text {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20 || r > 0x7e:
			if r >= 0x10000 {
				r -= 0x10000
				writeU(&b, 0xd800|(r>>10)&0x3ff)
				writeU(&b, 0xdc00|r&0x3ff)
			} else {
				writeU(&b, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func writeU(b *strings.Builder, r rune) {
	b.WriteString(`\u`)
	for shift := 12; shift >= 0; shift -= 4 {
		b.WriteByte(hexDigits[(r>>shift)&0xf])
	}
}

// checkSameAsDecodeStream states the fast decoder's law on one line: when it decodes a
// line it gives exactly the name and text DecodeStream gives, and that decoder accepts
// the line too, with the same id; its Quoted, when given, decodes to that text.
func checkSameAsDecodeStream(t interface{ Fatalf(string, ...any) }, line []byte, id string) (ok bool) {
	var buf []byte
	got, ok := decodeStubStream(line, id, &buf)
	if !ok {
		return false
	}
	want, err := DecodeStream(line)
	if err != nil {
		t.Fatalf("fast path decoded %q, DecodeStream refuses it: %v", line, err)
	}
	if want.ID != id || want.Name != got.Name || string(got.Text) != want.Text {
		t.Fatalf("fast path gave %s %q for id %q, DecodeStream %s %q for id %q", got.Name, got.Text, id, want.Name, want.Text, want.ID)
	}
	if got.Quoted != nil {
		var s string
		if err := json.Unmarshal(got.Quoted, &s); err != nil || s != want.Text {
			t.Fatalf("Quoted %q decodes to %q, %v; want %q", got.Quoted, s, err, want.Text)
		}
		for _, c := range got.Quoted {
			if c >= 0x80 || c < 0x20 {
				t.Fatalf("Quoted %q is not printable ASCII", got.Quoted)
			}
		}
	}
	return true
}

// textGen draws stream text: ASCII, escapes, non-ASCII, astral characters, and
// (through surrogates) the lone halves a Python str may hold.
var textGen = rapid.Custom(func(t *rapid.T) string {
	runes := rapid.SliceOfN(rapid.SampledFrom([]rune{
		'a', 'x', ' ', '\n', '\t', '\r', '"', '\\', '/', 0, 0x1f, 0x7f, 'é', '中', 0x2028, 0x1f600, 0xfffd,
	}), 0, 300).Draw(t, "runes")
	return string(runes)
})

func TestFastStreamDecodesTheStubsFrames(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		text := textGen.Draw(t, "text")
		id := rapid.SampledFrom([]string{"c1", "c22", "", "native", "r7"}).Draw(t, "id")
		name := rapid.SampledFrom([]string{StreamStdout, StreamStderr}).Draw(t, "name")
		line := stubStream(id, name, text)
		if !checkSameAsDecodeStream(t, line, id) {
			t.Fatalf("fast path refused the stub's own layout: %s", line)
		}
		var buf []byte
		got, _ := decodeStubStream(line, id, &buf)
		if string(got.Text) != text {
			t.Fatalf("text %q, want %q", got.Text, text)
		}
		if got.Quoted == nil {
			t.Fatalf("no Quoted for %s", line)
		}
	})
}

func TestFastStreamLoneSurrogatesAreDecodedAsEncodingJSONDoes(t *testing.T) {
	for _, body := range []string{
		`\ud800`, `\udc00`, `a\ud800b`, `\ud800\u0041`, `\ud800\ud800`, `\udc00\ud800`,
		`\ud83d\ude00`, `\ud83d\ude00\ud83d`, `\uD83D\uDE00`, `\ud800\`, `\ud800\u00`,
	} {
		line := []byte(`{"event":"stream","id":"c1","name":"stdout","text":"` + body + `"}`)
		var buf []byte
		got, ok := decodeStubStream(line, "c1", &buf)
		_, werr := DecodeStream(line)
		if ok != (werr == nil) {
			t.Errorf("%s: fast path ok %v, DecodeStream %v", body, ok, werr)
			continue
		}
		if !ok {
			continue
		}
		checkSameAsDecodeStream(t, line, "c1")
		lone := strings.Contains(string(got.Text), "\ufffd")
		if lone == (got.Quoted != nil) {
			t.Errorf("%s: text %q, Quoted %q: want Quoted only without a lone surrogate", body, got.Text, got.Quoted)
		}
	}
}

func TestFastStreamFallsBackOnAnyOtherLayout(t *testing.T) {
	good := string(stubStream("c1", "stdout", "hi\n"))
	for _, line := range []string{
		strings.Replace(good, `"name":"stdout"`, `"name":"stdin"`, 1),
		strings.Replace(good, `hi\n`, "hi\n", 1),
		strings.Replace(good, `hi\n`, "h\x01i", 1),
		strings.Replace(good, `hi\n`, `hi\x`, 1),
		strings.Replace(good, `hi\n`, `hi\`, 1),
		strings.Replace(good, `hi\n`, `hi"`, 1),
		strings.Replace(good, `hi\n`, `h"i`, 1),
		strings.Replace(good, `hi\n`, `hé`, 1),
		strings.Replace(good, `hi\n`, `hi\u12`, 1),
		strings.Replace(good, `hi\n`, `hi\u12g4`, 1),
		strings.Replace(good, `"}`, `","x":1}`, 1),
		strings.Replace(good, `{"event"`, `{ "event"`, 1),
		strings.Replace(good, `"id":"c1"`, `"id":"c\u0031"`, 1),
		strings.Replace(good, `"text":"hi\n"`, `"text":1`, 1),
		strings.Replace(good, `"text":"hi\n"`, `"text":"`, 1),
		good + " ",
		good[:len(good)-1],
	} {
		if checkSameAsDecodeStream(t, []byte(line), "c1") {
			t.Errorf("fast path took %s", line)
		}
	}
	if _, ok := decodeStubStream([]byte(good), "c2", new([]byte)); ok {
		t.Error("fast path decoded a frame of another id")
	}
	if _, ok := decodeStubStream([]byte(strings.ReplaceAll(good, "c1", `c"1`)), `c"1`, new([]byte)); ok {
		t.Error("fast path took an id that needs escaping")
	}
}

// TestStreamDecoderGivesWhatDecodeStreamGives runs one decoder over the stub's layout,
// other valid layouts, bad frames and frames of another id, in any order: each answer is
// DecodeStream's (or its refusal), a frame naming another id is an ErrBadField on "id",
// and the text of one call is intact until the next.
func TestStreamDecoderGivesWhatDecodeStreamGives(t *testing.T) {
	var d StreamDecoder
	rapid.Check(t, func(t *rapid.T) {
		text := textGen.Draw(t, "text")
		id := rapid.SampledFrom([]string{"c1", "c22", `c"3`, "c\u00e94"}).Draw(t, "id")
		name := rapid.SampledFrom([]string{StreamStdout, StreamStderr}).Draw(t, "name")
		qid, _ := json.Marshal(id)
		qtext, _ := json.Marshal(text)
		line := rapid.SampledFrom([]string{
			string(stubStream(id, name, text)),
			`{"event":"stream","id":` + string(qid) + `,"name":"` + name + `","text":` + pyQuote(text) + `}`,
			`{"event":"stream","id":` + string(qid) + `,"name":"` + name + `","text":` + string(qtext) + `}`,
			`{"text":` + string(qtext) + `,"name":"` + name + `","id":` + string(qid) + `,"event":"stream"}`,
			`{"event":"stream","id":` + string(qid) + `,"name":"stdin","text":` + string(qtext) + `}`,
			`{"event":"stream","id":` + string(qid) + `,"name":"` + name + `","text":"` + text + `"}`,
		}).Draw(t, "line")
		askID := id
		if rapid.Bool().Draw(t, "other id") {
			askID = "c9"
		}
		got, err := d.Decode([]byte(line), askID)
		want, werr := DecodeStream([]byte(line))
		switch {
		case werr != nil:
			if err == nil || !errors.Is(err, ErrBadField) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("%s: Decode %q, %v; DecodeStream refuses it: %v", line, got.Text, err, werr)
			}
		case want.ID != askID:
			var fe *FrameError
			if !errors.As(err, &fe) || fe.Field != "id" || !errors.Is(err, ErrBadField) {
				t.Fatalf("%s for id %s: Decode %q, %v; want an ErrBadField on id", line, askID, got.Text, err)
			}
		case err != nil || string(got.Text) != want.Text || got.Name != want.Name:
			t.Fatalf("%s: Decode %s %q, %v; DecodeStream %s %q", line, got.Name, got.Text, err, want.Name, want.Text)
		}
	})
}

// TestStreamDecoderKeepsNoLargeBuffer: after a frame larger than it keeps, the decoder
// holds no buffer.
func TestStreamDecoderKeepsNoLargeBuffer(t *testing.T) {
	var d StreamDecoder
	small, err := d.Decode(stubStream("c1", "stdout", "hi\n"), "c1")
	if err != nil || string(small.Text) != "hi\n" || d.buf == nil {
		t.Fatalf("small frame: %q, %v, buffer kept %v", small.Text, err, d.buf != nil)
	}
	big := strings.Repeat("ab\n", streamKeep/3+1)
	got, err := d.Decode(stubStream("c1", "stdout", big), "c1")
	if err != nil || string(got.Text) != big {
		t.Fatalf("big frame: %d bytes, %v", len(got.Text), err)
	}
	if d.buf != nil {
		t.Fatalf("decoder keeps a buffer of %d bytes after a big frame", cap(d.buf))
	}
}

// BenchmarkStreamDecoder decodes a stream frame of 64 Ki characters (lines of 1000) as
// the stub writes it, through StreamDecoder and through DecodeStream.
func BenchmarkStreamDecoder(b *testing.B) {
	text := strings.Repeat(strings.Repeat("x", 999)+"\n", 66)
	line := stubStream("c1", StreamStdout, text)
	b.Run("StreamDecoder", func(b *testing.B) {
		var d StreamDecoder
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			if st, err := d.Decode(line, "c1"); err != nil || len(st.Text) != len(text) {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeStream", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			if s, err := DecodeStream(line); err != nil || len(s.Text) != len(text) {
				b.Fatal(err)
			}
		}
	})
}
