package pathmap

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// buildTree makes a tree under dir from short specs:
//
//	"dir a/b"            a directory (and its parents)
//	"file a/x"           an empty file; "file a/x: text" with content
//	"symlink a/l -> t"   a symlink with target t (written as is; "$ROOT" is replaced by dir)
//	"hardlink a/h -> t"  a hard link to t (relative to dir, or absolute)
//	"fifo a/p"           a named pipe
func buildTree(t testing.TB, dir string, specs ...string) {
	t.Helper()
	for _, s := range specs {
		kind, rest, _ := strings.Cut(s, " ")
		rest = strings.ReplaceAll(rest, "$ROOT", dir)
		switch kind {
		case "dir":
			must(t, os.MkdirAll(filepath.Join(dir, rest), 0o755))
		case "file":
			name, content, _ := strings.Cut(rest, ": ")
			p := filepath.Join(dir, name)
			must(t, os.MkdirAll(filepath.Dir(p), 0o755))
			must(t, os.WriteFile(p, []byte(content), 0o644))
		case "symlink", "hardlink":
			name, target, ok := strings.Cut(rest, " -> ")
			if !ok {
				t.Fatalf("bad spec %q", s)
			}
			p := filepath.Join(dir, name)
			must(t, os.MkdirAll(filepath.Dir(p), 0o755))
			if kind == "symlink" {
				must(t, os.Symlink(target, p))
			} else {
				if !filepath.IsAbs(target) {
					target = filepath.Join(dir, target)
				}
				must(t, os.Link(target, p))
			}
		case "fifo":
			p := filepath.Join(dir, rest)
			must(t, os.MkdirAll(filepath.Dir(p), 0o755))
			must(t, unix.Mkfifo(p, 0o644))
		default:
			t.Fatalf("bad spec %q", s)
		}
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// tempDir is t.TempDir with its symlinks resolved, so host paths compare exactly.
func tempDir(t testing.TB) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	return d
}

// newMap makes a Map and closes it when the test ends.
func newMap(t testing.TB, cfg Config) *Map {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// reason returns the Reason of an *FsError, "" for nil, and fails on any other error.
func reason(t testing.TB, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	fe, ok := err.(*FsError)
	if !ok {
		t.Fatalf("error %v (%T) is not an *FsError", err, err)
	}
	return fe.Reason
}

// inside reports whether the host path p lies within one of the directories.
func inside(p string, dirs ...string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") || d == "/" {
			return true
		}
	}
	return false
}
