package settings

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
)

// maxDepth bounds how deeply a settings document may nest.
const maxDepth = 64

// kind is the JSON type of a node.
type kind uint8

const (
	kNull kind = iota
	kBool
	kNumber
	kString
	kArray
	kObject
)

func (k kind) String() string {
	return [...]string{"null", "boolean", "number", "string", "array", "object"}[k]
}

// node is a JSON value that keeps the order of an object's members, so a writer changes
// only what it sets and leaves the rest of a document as it was.
type node struct {
	kind  kind
	b     bool
	num   json.Number
	str   string
	keys  []string // object member names, in order
	elems []*node  // object member values (parallel to keys), or array elements
}

// parseNode parses one JSON value: the whole of data. A duplicate member name anywhere
// is an error (the document would mean two things).
func parseNode(data []byte) (*node, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	n, err := readNode(d, "", 0)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON value")
	}
	return n, nil
}

func readNode(d *json.Decoder, ptr string, depth int) (*node, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d at %q", maxDepth, ptr)
	}
	tok, err := d.Token()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return &node{kind: kNull}, nil
	case bool:
		return &node{kind: kBool, b: t}, nil
	case json.Number:
		return &node{kind: kNumber, num: t}, nil
	case string:
		return &node{kind: kString, str: t}, nil
	case json.Delim:
		switch t {
		case '[':
			n := &node{kind: kArray}
			for d.More() {
				e, err := readNode(d, index(ptr, len(n.elems)), depth+1)
				if err != nil {
					return nil, err
				}
				n.elems = append(n.elems, e)
			}
			_, err := d.Token() // ']'
			return n, err
		case '{':
			n := &node{kind: kObject}
			seen := map[string]bool{}
			for d.More() {
				tok, err := d.Token()
				if err != nil {
					return nil, err
				}
				key := tok.(string) // the decoder allows only strings here
				if seen[key] {
					return nil, fmt.Errorf("duplicate key at %q", child(ptr, key))
				}
				seen[key] = true
				e, err := readNode(d, child(ptr, key), depth+1)
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, key)
				n.elems = append(n.elems, e)
			}
			_, err := d.Token() // '}'
			return n, err
		}
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

// get returns the member key of an object node, or nil.
func (n *node) get(key string) *node {
	if n == nil || n.kind != kObject {
		return nil
	}
	if i := slices.Index(n.keys, key); i >= 0 {
		return n.elems[i]
	}
	return nil
}

// set replaces or appends member key of an object node.
func (n *node) set(key string, v *node) {
	if i := slices.Index(n.keys, key); i >= 0 {
		n.elems[i] = v
		return
	}
	n.keys = append(n.keys, key)
	n.elems = append(n.elems, v)
}

// remove deletes member key of an object node; it reports whether it was there.
func (n *node) remove(key string) bool {
	i := slices.Index(n.keys, key)
	if i < 0 {
		return false
	}
	n.keys, n.elems = slices.Delete(n.keys, i, i+1), slices.Delete(n.elems, i, i+1)
	return true
}

// MarshalJSON writes the node compactly, members in their order.
func (n *node) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	n.write(&buf)
	return buf.Bytes(), nil
}

func (n *node) write(buf *bytes.Buffer) {
	switch n.kind {
	case kNull:
		buf.WriteString("null")
	case kBool:
		buf.WriteString(strconv.FormatBool(n.b))
	case kNumber:
		buf.WriteString(n.num.String())
	case kString:
		writeString(buf, n.str)
	case kArray:
		buf.WriteByte('[')
		for i, e := range n.elems {
			if i > 0 {
				buf.WriteByte(',')
			}
			e.write(buf)
		}
		buf.WriteByte(']')
	case kObject:
		buf.WriteByte('{')
		for i, k := range n.keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, k)
			buf.WriteByte(':')
			n.elems[i].write(buf)
		}
		buf.WriteByte('}')
	}
}

// document renders a settings document: indented by two spaces, ending with a newline.
func (n *node) document() []byte {
	var compact, out bytes.Buffer
	n.write(&compact)
	if err := json.Indent(&out, compact.Bytes(), "", "  "); err != nil {
		return append(compact.Bytes(), '\n') // unreachable: write makes valid JSON
	}
	out.WriteByte('\n')
	return out.Bytes()
}

// writeString writes s as a JSON string, without encoding/json's HTML escapes.
func writeString(buf *bytes.Buffer, s string) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	buf.Write(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}
