package gate

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"pgregory.net/rapid"
)

// This file generates JSON-ish text for the differential tests of the validator and the
// head scanner, and holds their references: encoding/json itself.

// refObject is the validator's specification: valid UTF-8, json.Valid, an object at the
// top, and "event", "id", "type" each at most once among its top-level keys.
func refObject(b []byte) bool {
	if !utf8.Valid(b) || !json.Valid(b) {
		return false
	}
	t := bytes.TrimLeft(b, " \t\r\n")
	if len(t) == 0 || t[0] != '{' {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		return false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		k := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return false
		}
		if k == "event" || k == "id" || k == "type" {
			if seen[k] {
				return false
			}
			seen[k] = true
		}
	}
	return true
}

// jsonTokens are pieces, valid and not, that the generator strings together.
var jsonTokens = []string{
	"{", "}", "[", "]", ":", ",", " ", "\t", "\r", `"event"`, `"id"`, `"type"`, `"\u0065vent"`,
	`"a"`, `"\ud800"`, `"\ud83d\ude00"`, `"\ud83dx"`, `"\uDC00\uD800"`, `1`, `-0.5e+3`, `01`, `1.`, `-`,
	`2E-7`, `true`, `false`, `null`, `nul`, "\"\x01\"", "\xff", "\"\xc3\xa9\"", `"\\"`, `"\"`,
	`"\x"`, `"\u12"`, `"\/\b\f\n\r\t"`, "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", `"host_request"`,
	`"stream"`, `"fs.read"`,
}

// genJSON draws a JSON value (valid by construction) with random whitespace.
func genJSON(t *rapid.T, depth int) string {
	ws := func() string { return rapid.SampledFrom([]string{"", "", " ", "\t", " \r "}).Draw(t, "ws") }
	kind := rapid.IntRange(0, 6).Draw(t, "kind")
	if depth <= 0 && kind < 2 {
		kind += 2
	}
	switch kind {
	case 0:
		n := rapid.IntRange(0, 3).Draw(t, "n")
		parts := make([]string, n)
		for i := range parts {
			key := rapid.SampledFrom([]string{`"event"`, `"id"`, `"type"`, `"k"`, `"\u0069d"`, `"args"`}).Draw(t, "key")
			parts[i] = ws() + key + ws() + ":" + ws() + genJSON(t, depth-1) + ws()
		}
		return "{" + ws() + strings.Join(parts, ",") + "}"
	case 1:
		n := rapid.IntRange(0, 3).Draw(t, "n")
		parts := make([]string, n)
		for i := range parts {
			parts[i] = ws() + genJSON(t, depth-1) + ws()
		}
		return "[" + ws() + strings.Join(parts, ",") + "]"
	case 2:
		return genJSONString(t)
	case 3:
		return rapid.SampledFrom([]string{"0", "-1", "12.5", "1e9", "-0.0E-0", "123456789012345678901234567890"}).Draw(t, "num")
	case 4:
		return rapid.SampledFrom([]string{"true", "false", "null"}).Draw(t, "lit")
	default:
		return genJSONString(t)
	}
}

// genJSONString draws a JSON string literal: plain text, escapes of every kind and
// surrogates lone or paired, and raw UTF-8, long enough to cross the 8-byte steps.
func genJSONString(t *rapid.T) string {
	pieces := []string{"a", "xyz0123456789", `\"`, `\\`, `\/`, `\n`, `\t`, `\u0000`, `\u00e9`, `\ud83d\ude00`,
		`\ud800`, `\udc00`, `\uD83D`, `\ud83d\u0041`, "é", "\u2028", "😀", "\u00ff", " ", "event", "host_request"}
	n := rapid.IntRange(0, 12).Draw(t, "pieces")
	var sb strings.Builder
	sb.WriteByte('"')
	for range n {
		sb.WriteString(rapid.SampledFrom(pieces).Draw(t, "piece"))
	}
	sb.WriteByte('"')
	return sb.String()
}

// genJSONish draws either valid JSON, valid JSON with one byte changed, or a run of tokens.
func genJSONish(t *rapid.T) []byte {
	var b []byte
	switch rapid.IntRange(0, 2).Draw(t, "how") {
	case 0:
		b = []byte(genJSON(t, 3))
	case 1:
		b = []byte(genJSON(t, 3))
		if len(b) > 0 {
			i := rapid.IntRange(0, len(b)-1).Draw(t, "at")
			b[i] = rapid.SampledFrom([]byte("{}[]\":,\\ 0a\x00\x80\xff")).Draw(t, "to")
		}
	default:
		n := rapid.IntRange(0, 12).Draw(t, "tokens")
		for range n {
			b = append(b, rapid.SampledFrom(jsonTokens).Draw(t, "tok")...)
		}
	}
	return b
}
