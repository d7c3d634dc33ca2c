// Package testneed is the one "skip here, fail under CI" rule for tests that need a real
// resource (a tool on PATH, python3, root, a second file system, a Docker Engine through
// testneed/dockerneed): under CI=true a missing resource fails the test, so CI never
// passes by skipping; elsewhere the test skips, naming what is missing.
//
// It imports nothing of kennel, so the in-package tests of every package (images
// included) can use it.
//
//	testneed.Root(t)               // to mount a tmpfs: say why at the call
//	git := testneed.Tool(t, "git") // its path
//	python := testneed.Python(t)   // the interpreter python3 runs
//	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
//		testneed.Missing(t, "mount -t tmpfs", err)
//	}
//	testneed.Need(t, a.Fsid != b.Fsid, "a /dev/shm on another file system")
package testneed

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// Missing fails t under CI=true and skips it elsewhere, naming what is missing and why
// (err). It does not return.
func Missing(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is required under CI=true: %v", what, err)
	}
	t.Skipf("%s is missing: %v", what, err)
}

// Need returns when ok; otherwise it fails t under CI=true and skips it elsewhere, naming
// what is missing.
func Need(t testing.TB, ok bool, what string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is required under CI=true", what)
	}
	t.Skipf("%s is missing", what)
}

// Tools requires each tool (a name looked up on PATH, or a path).
func Tools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		Tool(t, tool)
	}
}

// Tool requires a tool (a name looked up on PATH, or a path) and returns its path.
func Tool(t testing.TB, tool string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		Missing(t, tool, err)
	}
	return p
}

// Root requires the test to run as root. Say at the call why, as a comment.
func Root(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "root", fmt.Errorf("the test runs as uid %d", os.Geteuid()))
	}
}

// Python requires python3 on PATH and returns the interpreter it runs (its
// sys.executable: a pyenv shim resolved to the real binary). It asks python3 once per
// test binary.
func Python(t testing.TB) string {
	t.Helper()
	p, err := python()
	if err != nil {
		Missing(t, "python3", err)
	}
	return p
}

// python is the interpreter behind python3 on PATH, found once: what PATH holds does not
// change while tests run.
var python = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		return "", fmt.Errorf("run python3: %w", err)
	}
	p := strings.TrimSpace(string(out))
	if p == "" {
		return "", errors.New("python3 names no sys.executable")
	}
	return p, nil
})
