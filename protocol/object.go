package protocol

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// fields is a frame's top-level object: key to raw value, each key once.
type fields map[string]json.RawMessage

// parseObject splits line into its top-level keys. The line must be valid UTF-8 and one
// JSON object (surrounding whitespace and one trailing newline allowed) with no key twice:
// encoding/json keeps the last of two equal keys while the gate decides on the first, so
// a repeated key is refused rather than read two ways.
func parseObject(frame string, line []byte) (fields, error) {
	if !utf8.Valid(line) {
		return nil, &FrameError{Frame: frame, Err: fmt.Errorf("%w: not valid UTF-8", ErrMalformed)}
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	malformed := func(err error) error {
		return &FrameError{Frame: frame, Err: fmt.Errorf("%w: %w", ErrMalformed, err)}
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, malformed(err)
	}
	if tok != json.Delim('{') {
		return nil, malformed(errors.New("not a JSON object"))
	}
	m := make(fields, 8)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, malformed(err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, malformed(fmt.Errorf("key %v is not a string", tok))
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, malformed(err)
		}
		if _, dup := m[key]; dup {
			return nil, malformed(fmt.Errorf("key %q twice", key))
		}
		m[key] = raw
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, malformed(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, malformed(errors.New("data after the object"))
	}
	return m, nil
}

func jsonKind(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// str reads a required string field.
func (m fields) str(frame, key string) (string, error) {
	raw, ok := m[key]
	if !ok {
		return "", badField(frame, key, "missing")
	}
	if raw[0] != '"' {
		return "", badField(frame, key, "want a string, got %s", jsonKind(raw))
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", badField(frame, key, "%v", err)
	}
	return s, nil
}

// oneOf reads a required string field that must be one of allowed.
func (m fields) oneOf(frame, key string, allowed ...string) (string, error) {
	s, err := m.str(frame, key)
	if err != nil {
		return "", err
	}
	for _, a := range allowed {
		if s == a {
			return s, nil
		}
	}
	return "", badField(frame, key, "%q is not one of %q", s, allowed)
}

// optStr reads a string field that may be null (nil).
func (m fields) optStr(frame, key string) (*string, error) {
	raw, ok := m[key]
	if !ok {
		return nil, badField(frame, key, "missing")
	}
	if string(raw) == "null" {
		return nil, nil
	}
	s, err := m.str(frame, key)
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// integer reads a required integer field.
func (m fields) integer(frame, key string) (int, error) {
	raw, ok := m[key]
	if !ok {
		return 0, badField(frame, key, "missing")
	}
	if c := raw[0]; c != '-' && (c < '0' || c > '9') {
		return 0, badField(frame, key, "want an integer, got %s", jsonKind(raw))
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, badField(frame, key, "want an integer, got %s", raw)
	}
	return n, nil
}

// optInt reads an integer field that may be null (nil).
func (m fields) optInt(frame, key string) (*int, error) {
	raw, ok := m[key]
	if !ok {
		return nil, badField(frame, key, "missing")
	}
	if string(raw) == "null" {
		return nil, nil
	}
	n, err := m.integer(frame, key)
	if err != nil {
		return nil, err
	}
	return &n, nil
}

// object reads a required field that must be a JSON object, as raw bytes.
func (m fields) object(frame, key string) (json.RawMessage, error) {
	raw, ok := m[key]
	if !ok {
		return nil, badField(frame, key, "missing")
	}
	if raw[0] != '{' {
		return nil, badField(frame, key, "want an object, got %s", jsonKind(raw))
	}
	return raw, nil
}

// base64 reads a required string field holding standard base64 with padding.
func (m fields) base64(frame, key string) ([]byte, error) {
	s, err := m.str(frame, key)
	if err != nil {
		return nil, err
	}
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, badField(frame, key, "not base64: %v", err)
	}
	return b, nil
}
