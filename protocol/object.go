package protocol

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
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

// frameReader reads one frame's fields and keeps the first refusal in err: after it, every
// read returns its zero value and records nothing, so a decoder names the first bad field.
type frameReader struct {
	m     fields
	frame string
	err   error
}

// fail records a refusal of key unless one is recorded already.
func (r *frameReader) fail(key, format string, args ...any) {
	if r.err == nil {
		r.err = badField(r.frame, key, format, args...)
	}
}

// check records a refusal of key when bad holds.
func (r *frameReader) check(bad bool, key, format string, args ...any) {
	if bad {
		r.fail(key, format, args...)
	}
}

// has reports whether the frame has key (an optional field).
func (r *frameReader) has(key string) bool {
	_, ok := r.m[key]
	return ok
}

// raw returns key's raw value, refusing a missing key; ok is false once anything failed.
func (r *frameReader) raw(key string) (json.RawMessage, bool) {
	if r.err != nil {
		return nil, false
	}
	raw, ok := r.m[key]
	if !ok {
		r.fail(key, "missing")
	}
	return raw, ok
}

// null reports whether key is present and null, refusing a missing key.
func (r *frameReader) null(key string) bool {
	raw, ok := r.raw(key)
	return ok && string(raw) == "null"
}

// str reads a required string field.
func (r *frameReader) str(key string) (s string) {
	raw, ok := r.raw(key)
	switch {
	case !ok:
	case raw[0] != '"':
		r.fail(key, "want a string, got %s", jsonKind(raw))
	default:
		if err := json.Unmarshal(raw, &s); err != nil {
			r.fail(key, "%v", err)
		}
	}
	return s
}

// oneOf reads a required string field that must be one of allowed.
func (r *frameReader) oneOf(key string, allowed ...string) string {
	s := r.str(key)
	if r.err == nil && !slices.Contains(allowed, s) {
		r.fail(key, "%q is not one of %q", s, allowed)
		return ""
	}
	return s
}

// opt reads a field that may be null (nil) with read (r.str, r.integer).
func opt[T any](r *frameReader, key string, read func(string) T) *T {
	if r.null(key) || r.err != nil {
		return nil
	}
	v := read(key)
	return &v
}

// integer reads a required integer field.
func (r *frameReader) integer(key string) (n int) {
	raw, ok := r.raw(key)
	switch {
	case !ok:
	case raw[0] != '-' && (raw[0] < '0' || raw[0] > '9'):
		r.fail(key, "want an integer, got %s", jsonKind(raw))
	default:
		if err := json.Unmarshal(raw, &n); err != nil {
			r.fail(key, "want an integer, got %s", raw)
		}
	}
	return n
}

// object reads a required field that must be a JSON object, as raw bytes.
func (r *frameReader) object(key string) json.RawMessage {
	raw, ok := r.raw(key)
	if ok && raw[0] != '{' {
		r.fail(key, "want an object, got %s", jsonKind(raw))
		return nil
	}
	return raw
}

// base64 reads a required string field holding standard base64 with padding.
func (r *frameReader) base64(key string) []byte {
	s := r.str(key)
	if r.err != nil {
		return nil
	}
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil {
		r.fail(key, "not base64: %v", err)
	}
	return b
}
