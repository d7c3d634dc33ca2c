package settings

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// MaxFileSize is the largest settings file read, in bytes.
const MaxFileSize = 1 << 20

// readDocument reads and parses a settings file. A file that does not exist reads as an
// empty object (exists false). Every other failure matches ErrUnreadable: the file cannot
// be opened or read, is not a regular file, is writable by every user or owned by another
// user (but root), is over MaxFileSize, is not a JSON object, has a duplicate key, or has
// a version other than 1.
func readDocument(file string) (root *node, exists bool, err error) {
	// O_NONBLOCK: a FIFO put in place of the file is opened without waiting, then refused.
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return &node{kind: kObject}, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w: %w", file, ErrUnreadable, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, true, fmt.Errorf("read %s: %w: %w", file, ErrUnreadable, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, true, fmt.Errorf("read %s: %w: not a regular file", file, ErrUnreadable)
	}
	// Settings run code: a file another user wrote is not ours to apply.
	if fi.Mode().Perm()&0o002 != 0 {
		return nil, true, fmt.Errorf("read %s: %w: writable by every user (chmod o-w)", file, ErrUnreadable)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() && st.Uid != 0 {
		return nil, true, fmt.Errorf("read %s: %w: owned by uid %d, not by this user", file, ErrUnreadable, st.Uid)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, true, fmt.Errorf("read %s: %w: %w", file, ErrUnreadable, err)
	}
	if len(data) > MaxFileSize {
		return nil, true, fmt.Errorf("read %s: %w: over %d bytes", file, ErrUnreadable, MaxFileSize)
	}
	root, err = parseDocument(data)
	if err != nil {
		return nil, true, fmt.Errorf("read %s: %w", file, err)
	}
	return root, true, nil
}

// parseDocument parses a settings document: a JSON object (an empty file is an empty
// object) whose "version", if present, is 1.
func parseDocument(data []byte) (*node, error) {
	if len(data) == 0 {
		return &node{kind: kObject}, nil
	}
	root, err := parseNode(data)
	if err != nil {
		return nil, fmt.Errorf("%w: not valid JSON: %w", ErrUnreadable, err)
	}
	if root.kind != kObject {
		return nil, fmt.Errorf("%w: the document is a JSON %s, not an object", ErrUnreadable, root.kind)
	}
	if v := root.get(versionKey); v != nil && (v.kind != kNumber || v.num.String() != "1") {
		return nil, fmt.Errorf("%w: version %s is not known (this build reads version 1)", ErrUnreadable, mustJSON(v))
	}
	return root, nil
}

func mustJSON(n *node) string {
	b, _ := n.MarshalJSON()
	return string(b)
}

// decodeDocument reads every declared key of a parsed document into Settings. Each bad
// leaf and each undeclared key is one Problem and is dropped alone; the rest applies.
func decodeDocument(file string, root *node) (Settings, []*Problem) {
	var s Settings
	var problems []*Problem
	bad := func(ptr string, err error) {
		problems = append(problems, &Problem{File: file, Pointer: ptr, Err: err})
	}
	for i, key := range root.keys {
		if key == versionKey {
			continue
		}
		k := lookup(key)
		if k == nil {
			bad(child("", key), ErrUndeclared)
			continue
		}
		k.decode(root.elems[i], child("", key), &s, bad)
	}
	return s, problems
}
