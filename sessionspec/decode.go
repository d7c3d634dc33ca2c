package sessionspec

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/kennel-dev/kennel/pathmap"
)

// MaxSize bounds the JSON of a description Decode reads.
const MaxSize = 1 << 20

// Decode reads a description from its JSON (the setting's form) and checks it with
// Validate. Every bad field is named, each a *FieldError, joined; an unknown field is one
// (a misspelt lock-down field must not be dropped in silence). On any error it returns
// nil and nothing else: a description with a bad field starts no kernel.
func Decode(data []byte) (*Transport, error) {
	t, errs := decode(data)
	if t == nil {
		return nil, errors.Join(errs...)
	}
	// Validate what did decode too, so every bad field is named at once; a field decode
	// already named is not named twice.
	named := map[string]bool{}
	for _, e := range errs {
		named[e.(*FieldError).Field] = true
	}
	if verr := t.Validate(); verr != nil {
		for _, e := range flatten(verr) {
			var fe *FieldError
			if errors.As(e, &fe) && !namedUnder(named, fe.Field) && !sameElement(named, fe.Field) && !namedWithin(named, fe.Field) {
				errs = append(errs, e)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return t, nil
}

// namedUnder reports whether field, or a field it is part of, is in named.
func namedUnder(named map[string]bool, field string) bool {
	for f := field; ; {
		if named[f] {
			return true
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			return false
		}
		f = f[:i]
	}
}

// sameElement reports whether a field of the array element field belongs to (its path up
// to its first index, "pathMap[3]") is in named: an element decode refused is not named
// again for what its refusal left out.
func sameElement(named map[string]bool, field string) bool {
	i := strings.IndexByte(field, ']')
	if i < 0 {
		return false
	}
	elem := field[:i+1]
	for f := range named {
		if f == elem || strings.HasPrefix(f, elem+".") {
			return true
		}
	}
	return false
}

// namedWithin reports whether a part of field (an element or member of it) is in named:
// "argvPrefix is empty" is not said of a list whose only element was refused.
func namedWithin(named map[string]bool, field string) bool {
	if field == "" {
		return false
	}
	for f := range named {
		if strings.HasPrefix(f, field+"[") || strings.HasPrefix(f, field+".") {
			return true
		}
	}
	return false
}

// flatten lists the errors a join holds.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// UnmarshalJSON decodes with Decode, so a description inside another document (an API
// request) is checked the same way.
func (t *Transport) UnmarshalJSON(data []byte) error {
	d, err := Decode(data)
	if err != nil {
		return err
	}
	*t = *d
	return nil
}

// decode reads the fields of data, naming each bad one; it does not Validate.
func decode(data []byte) (*Transport, []error) {
	if len(data) > MaxSize {
		return nil, []error{bad("", "description of %d bytes is over %d", len(data), MaxSize)}
	}
	fields, err := object(data)
	if err != nil {
		return nil, []error{bad("", "%v", err)}
	}
	t := &Transport{}
	var errs []error
	one := func(field string, raw json.RawMessage, v any) {
		if err := strict(raw, v); err != nil {
			errs = append(errs, bad(field, "%v", err))
		}
	}
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		raw := fields[key]
		switch key {
		case "local":
			errs = into(&t.Local, key, raw, errs)
		case "argvPrefix":
			var serrs []error
			t.ArgvPrefix, serrs = stringList("argvPrefix", raw)
			errs = append(errs, serrs...)
			if t.ArgvPrefix == nil {
				t.ArgvPrefix = []string{} // present: the kind is named, Validate says why it is bad
			}
		case "docker":
			errs = into(&t.Docker, key, raw, errs)
		case "ssh":
			errs = into(&t.SSH, key, raw, errs)
		case "containerd":
			errs = into(&t.Containerd, key, raw, errs)
		case "kubernetes":
			errs = into(&t.Kubernetes, key, raw, errs)
		case "python":
			one("python", raw, &t.Python)
		case "pathMap":
			var ms []json.RawMessage
			one("pathMap", raw, &ms)
			t.PathMap = []pathmap.Mount{}
			for i, m := range ms {
				// A refused element is kept (as far as it decoded) so later ones keep
				// their index in what Validate names.
				mount, merrs := subObject[pathmap.Mount](fmt.Sprintf("pathMap[%d]", i), m)
				errs = append(errs, merrs...)
				t.PathMap = append(t.PathMap, *mount)
			}
		case "env":
			var serrs []error
			t.Env, serrs = stringList("env", raw)
			errs = append(errs, serrs...)
		default:
			errs = append(errs, unknown(key, "local, argvPrefix, docker, ssh, containerd, kubernetes, python, pathMap, env"))
		}
	}
	return t, errs
}

// into decodes raw, the object of field, into *dst (subObject) and returns errs with what
// it refuses added.
func into[T any](dst **T, field string, raw json.RawMessage, errs []error) []error {
	v, verrs := subObject[T](field, raw)
	*dst = v
	return append(errs, verrs...)
}

// unknown is the error of a field no description has.
func unknown(field, known string) *FieldError {
	return &FieldError{Field: field, Unknown: true, Err: fmt.Errorf("unknown field (known: %s)", known)}
}

// stringList decodes a JSON array of strings, naming each element that is not one (it
// is "" in the list returned, which a refused description never leaves).
func stringList(field string, raw json.RawMessage) ([]string, []error) {
	var elems []json.RawMessage
	if err := strict(raw, &elems); err != nil {
		return nil, []error{bad(field, "want an array of strings: %v", err)}
	}
	if elems == nil {
		return nil, []error{bad(field, "want an array of strings, got null")}
	}
	out := make([]string, 0, len(elems))
	var errs []error
	for i, e := range elems {
		var s string
		if err := strict(e, &s); err != nil {
			// Kept as "" so later elements keep their index in what Validate names.
			errs = append(errs, bad(fmt.Sprintf("%s[%d]", field, i), "%v", err))
		}
		out = append(out, s)
	}
	return out, errs
}

// subObject decodes raw into a new T, naming each bad or unknown field under prefix.
func subObject[T any](prefix string, raw json.RawMessage) (*T, []error) {
	v := new(T)
	fields, err := object(raw)
	if err != nil {
		return v, []error{bad(prefix, "%v", err)}
	}
	known := map[string]bool{} // the JSON names of T's fields
	rt := reflect.TypeFor[T]()
	for i := range rt.NumField() {
		if name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			known[name] = true
		}
	}
	var errs []error
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		if !known[key] {
			names := cmp.Or(strings.Join(slices.Sorted(maps.Keys(known)), ", "), "none")
			errs = append(errs, unknown(prefix+"."+key, names))
			continue
		}
		// Decode the one field into a fresh T and take it over, so each bad leaf is
		// named on its own.
		one, _ := json.Marshal(map[string]json.RawMessage{key: fields[key]})
		if err := strict(one, v); err != nil {
			errs = append(errs, bad(prefix+"."+key, "%v", unwrapJSON(err)))
		}
	}
	return v, errs
}

// object decodes data as one JSON object's members.
func object(data []byte) (map[string]json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := strict(data, &fields); err != nil {
		return nil, err
	}
	if fields == nil {
		return nil, errors.New("want an object, got null")
	}
	return fields, nil
}

// strict decodes data into v: one JSON value, no unknown fields.
func strict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return unwrapJSON(err)
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}

// unwrapJSON words encoding/json's type errors as "want T, got K".
func unwrapJSON(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("want %s, got %s", te.Type, te.Value)
	}
	return err
}
