package output

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// fataler is what helpers need of a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// cleaner is what privateTempDir needs of a *testing.T or a *rapid.T.
type cleaner interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// privateTempDir returns a fresh 0700 directory removed after the test.
func privateTempDir(t cleaner) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kennel-output-test-*")
	if err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// readFileMode reads path after checking its permission bits are mode.
func readFileMode(path string, mode os.FileMode) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm() != mode {
		return nil, fmt.Errorf("%s has mode %04o, want %04o", path, fi.Mode().Perm(), mode)
	}
	return os.ReadFile(path)
}

func dirLen(t interface{ Fatalf(string, ...any) }, dir string) int {
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read dir: %v", err)
	}
	return len(es)
}

var _ cleaner = (*testing.T)(nil)

func runCmd(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}
