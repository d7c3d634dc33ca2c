package pathmap

import (
	"path/filepath"
	"strings"
	"testing"
)

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
