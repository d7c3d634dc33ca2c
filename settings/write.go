package settings

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Doc is one settings file to change.
type Doc struct {
	// Path is the settings.json file.
	Path string
	// Project marks a project's file: a global-only key is refused there (ErrScope).
	Project bool
}

// GlobalDoc returns the global settings file.
func GlobalDoc() (Doc, error) {
	f, err := GlobalFile()
	return Doc{Path: f}, err
}

// ProjectDoc returns the settings file of the project at dir.
func ProjectDoc(dir string) (Doc, error) {
	f, err := ProjectFile(dir)
	return Doc{Path: f, Project: true}, err
}

// Set sets key, a declared key or a dotted path into one ("kernelTransport.python"), to
// value (JSON), in the document on disk when it writes.
//
// Set reads the file under its lock (flock on Path+".lock"), changes that one key and
// writes the result atomically (a new file renamed over the old one, mode 0600; missing
// directories are made 0700). Every other key keeps its value as written, undeclared and
// bad ones included. It writes nothing and returns the error when the file cannot be read
// or parsed (ErrUnreadable), is a symlink, when key is undeclared (ErrUndeclared) or
// global-only in a project file (ErrScope), or when the setting does not hold value
// (ErrBadValue, naming the leaf).
func (d Doc) Set(ctx context.Context, key string, value json.RawMessage) error {
	v, err := parseNode(value)
	if err != nil {
		return fmt.Errorf("set %s: %w: value is not JSON: %w", key, ErrBadValue, err)
	}
	return d.change(ctx, key, v)
}

// Unset removes key (a declared key or a dotted path into one) from the document, under
// the same rules as Set; a key that is not there changes nothing and writes nothing.
func (d Doc) Unset(ctx context.Context, key string) error {
	return d.change(ctx, key, nil)
}

// change sets path key to v, or removes it when v is nil.
func (d Doc) change(ctx context.Context, key string, v *node) error {
	path := strings.Split(key, ".")
	k := lookup(path[0])
	if k == nil || slices.Contains(path, "") {
		return fmt.Errorf("set %s: %w", key, ErrUndeclared)
	}
	if d.Project && k.Scope == GlobalOnly {
		return fmt.Errorf("set %s in %s: %w: set it in the global settings", key, d.Path, ErrScope)
	}
	if err := d.prepare(); err != nil {
		return fmt.Errorf("set %s: %w", key, err)
	}
	unlock, err := lockFile(ctx, d.Path+".lock")
	if err != nil {
		return fmt.Errorf("set %s: %w", key, err)
	}
	defer unlock()
	root, _, err := readDocument(d.Path)
	if err != nil {
		return fmt.Errorf("set %s: %w", key, err)
	}
	changed, err := apply(root, path, v)
	if err != nil {
		return fmt.Errorf("set %s in %s: %w", key, d.Path, err)
	}
	if !changed {
		return nil
	}
	if top := root.get(path[0]); top != nil {
		var s Settings
		var bad *Problem
		k.decode(top, child("", path[0]), &s, func(ptr string, err error) {
			if bad == nil && (under(ptr, dotted(path)) || under(dotted(path), ptr)) {
				bad = &Problem{File: d.Path, Pointer: ptr, Err: err}
			}
		})
		if bad != nil {
			return fmt.Errorf("set %s: %w", key, bad)
		}
	}
	if err := writeAtomic(d.Path, root.document()); err != nil {
		return fmt.Errorf("set %s: %w", key, err)
	}
	return nil
}

// prepare makes the file's directory (0700) and refuses symlinks where a write would
// follow them out of place: the file itself, and a project's .kennel directory.
func (d Doc) prepare() error {
	dir := filepath.Dir(d.Path)
	if d.Project {
		if fi, err := os.Lstat(dir); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%w: %s is a symlink", ErrUnreadable, dir)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if fi, err := os.Lstat(d.Path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("%w: %s is a symlink; change the file it points to", ErrUnreadable, d.Path)
	}
	return nil
}

// apply sets path to v in root (making missing objects on the way), or removes it when v
// is nil; it reports whether root changed.
func apply(root *node, path []string, v *node) (bool, error) {
	n := root
	for i, p := range path[:len(path)-1] {
		next := n.get(p)
		if next == nil {
			if v == nil {
				return false, nil
			}
			next = &node{kind: kObject}
			n.set(p, next)
		} else if next.kind != kObject {
			return false, fmt.Errorf("%w: %s is a %s, not an object", ErrBadValue, strings.Join(path[:i+1], "."), next.kind)
		}
		n = next
	}
	last := path[len(path)-1]
	if v == nil {
		return n.remove(last), nil
	}
	n.set(last, v)
	return true, nil
}

// writeAtomic replaces file with data: a new file (0600) beside it, synced, renamed
// over it, and the directory synced.
func writeAtomic(file string, data []byte) error {
	dir := filepath.Dir(file)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(file)+".tmp-*")
	if err != nil {
		return err
	}
	err = tmp.Chmod(0o600)
	if err == nil {
		_, err = tmp.Write(data)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), file)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// ParseValue reads a command-line VALUE: JSON when it parses as JSON, else the text as a
// JSON string (so `set logLevel debug` needs no quotes).
func ParseValue(arg string) json.RawMessage {
	if _, err := parseNode([]byte(arg)); err == nil && strings.TrimSpace(arg) != "" {
		return json.RawMessage(arg)
	}
	b, _ := json.Marshal(arg)
	return b
}
