package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kennel-dev/kennel/workspaces"
)

// The detached sweep runs this test binary: it must run main.
func init() { sweepEnv = []string{envRunMain + "=1"} }

// runWorkspace runs `kennel workspace args...` on newWorkspaceCmd alone and returns stdout.
func runWorkspace(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := newWorkspaceCmd()
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs(args)
	cmd.SilenceUsage = true
	err := cmd.Execute()
	return stdout.String(), stderr.String(), err
}

// TestWorkspaceCreateAndHandback runs the two verbs as CI would: create prints the
// child's path; the child changes it; handback --json prints what came back; a second
// handback prints the recorded outcome.
func TestWorkspaceCreateAndHandback(t *testing.T) {
	dir := t.TempDir()
	parent := filepath.Join(dir, "parent")
	os.MkdirAll(filepath.Join(parent, "src"), 0o755)
	os.WriteFile(filepath.Join(parent, "src", "a.py"), []byte("a = 1\n"), 0o644)
	os.WriteFile(filepath.Join(parent, "b.txt"), []byte("b"), 0o644)
	state := filepath.Join(dir, "state")

	out, stderr, err := runWorkspace(t, "create", parent, "--state", state, "--id", "child-1")
	if err != nil {
		t.Fatalf("create: %v\n%s", err, stderr)
	}
	child := strings.TrimSpace(out)
	if want := filepath.Join(state, "workspaces", workspaces.ParentKey(parent), "child-1", "work"); child != want {
		t.Fatalf("create printed %q, want %q", child, want)
	}
	if data, err := os.ReadFile(filepath.Join(child, "src", "a.py")); err != nil || string(data) != "a = 1\n" {
		t.Fatalf("the copy: %q %v", data, err)
	}
	os.WriteFile(filepath.Join(child, "src", "a.py"), []byte("a = 2\n"), 0o644)
	os.WriteFile(filepath.Join(child, "new.txt"), []byte("new"), 0o644)
	os.Remove(filepath.Join(child, "b.txt"))

	out, stderr, err = runWorkspace(t, "handback", child, "--json")
	if err != nil {
		t.Fatalf("handback: %v\n%s", err, stderr)
	}
	var got struct {
		Taken, Removed []string
		Conflicts      []any
		Repeat         bool
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("handback --json printed %q: %v", out, err)
	}
	if strings.Join(got.Taken, ",") != "new.txt,src/a.py" || strings.Join(got.Removed, ",") != "b.txt" || len(got.Conflicts) != 0 || got.Repeat {
		t.Fatalf("outcome %+v", got)
	}
	if data, _ := os.ReadFile(filepath.Join(parent, "src", "a.py")); string(data) != "a = 2\n" {
		t.Fatalf("parent's a.py holds %q", data)
	}
	out, _, err = runWorkspace(t, "handback", child)
	if err != nil || !strings.Contains(out, "2 taken, 1 removed, 0 conflicts") || !strings.Contains(out, "recorded earlier") {
		t.Fatalf("second handback: %v\n%s", err, out)
	}
}

// TestWorkspaceErrors checks bad input fails with the package's typed errors.
func TestWorkspaceErrors(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := runWorkspace(t, "create", dir, "--state", filepath.Join(dir, "s"), "--id", "../x"); !errors.Is(err, workspaces.ErrInvalidID) {
		t.Fatalf("bad id: %v", err)
	}
	if _, _, err := runWorkspace(t, "handback", dir); !errors.Is(err, workspaces.ErrNotWorkspace) {
		t.Fatalf("not a workspace: %v", err)
	}
	if _, _, err := runWorkspace(t, "create"); err == nil {
		t.Fatalf("create without DIR succeeded")
	}
}

// TestProgressBar checks the bar draws only on a terminal and only after a second, and
// clears its line at the end.
func TestProgressBar(t *testing.T) {
	var w bytes.Buffer
	b := newProgressBar(&w)
	b.update(workspaces.Progress{Phase: "copy", Done: 1, Total: 2})
	if w.Len() != 0 {
		t.Fatalf("drew on a buffer: %q", w.String())
	}
	b.tty = true
	b.update(workspaces.Progress{Phase: "copy", Done: 1, Total: 2})
	if w.Len() != 0 {
		t.Fatalf("drew before a second: %q", w.String())
	}
	b.start = b.start.Add(-2 * barDelay)
	b.update(workspaces.Progress{Phase: "copy", Done: 1, Total: 2})
	if !strings.Contains(w.String(), "copy   [###############...............] 1/2") {
		t.Fatalf("bar %q", w.String())
	}
	b.done()
	if !strings.HasSuffix(w.String(), "\r\x1b[K") {
		t.Fatalf("not cleared: %q", w.String())
	}
	n := w.Len()
	b.update(workspaces.Progress{Phase: "copy", Done: 2, Total: 2})
	if w.Len() != n {
		t.Fatalf("drew after done")
	}
}

// TestDefaultStateDir checks the --state default.
func TestDefaultStateDir(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/x/state")
	if got := defaultStateDir(); got != "/x/state/kennel" {
		t.Fatalf("with XDG_STATE_HOME: %q", got)
	}
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "/home/u")
	if got := defaultStateDir(); got != "/home/u/.local/state/kennel" {
		t.Fatalf("with HOME: %q", got)
	}
}

// TestWorkspaceHandbackDoesNotWaitForTheRemoval runs handback as a process of its own
// with its output read to EOF (as a CI step reads it) while the test holds the lock of
// the workspace's trash/, which the removal must take: the command exits with its
// outcome all the same, and holds neither stdout nor stderr open; once the lock is let
// go, the detached sweep removes the base and the copy.
func TestWorkspaceHandbackDoesNotWaitForTheRemoval(t *testing.T) {
	dir := t.TempDir()
	parent := filepath.Join(dir, "parent")
	os.MkdirAll(filepath.Join(parent, "src"), 0o755)
	os.WriteFile(filepath.Join(parent, "src", "a.py"), []byte("a = 1\n"), 0o644)
	state := filepath.Join(dir, "state")
	out, stderr, err := runWorkspace(t, "create", parent, "--state", state, "--id", "c")
	if err != nil {
		t.Fatalf("create: %v\n%s", err, stderr)
	}
	child := strings.TrimSpace(out)
	wsDir := filepath.Dir(child)
	os.WriteFile(filepath.Join(child, "src", "a.py"), []byte("a = 2\n"), 0o644)

	trash := filepath.Join(wsDir, "trash")
	if err := os.Mkdir(trash, 0o700); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(trash)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	got, err := kennelCmd(t, dir, "workspace", "handback", child).CombinedOutput()
	if err != nil || !strings.Contains(string(got), "1 taken, 0 removed, 0 conflicts") {
		t.Fatalf("handback: %v\n%s", err, got)
	}
	if data, _ := os.ReadFile(filepath.Join(parent, "src", "a.py")); string(data) != "a = 2\n" {
		t.Fatalf("parent's a.py holds %q", data)
	}
	// The removal waits for the lock: the base and the copy are whole in trash/.
	if data, err := os.ReadFile(filepath.Join(trash, "work", "src", "a.py")); err != nil || string(data) != "a = 2\n" {
		t.Fatalf("trash/work/src/a.py: %q, %v", data, err)
	}
	if _, err := os.Stat(filepath.Join(trash, "base")); err != nil {
		t.Fatalf("trash/base: %v", err)
	}
	held.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Lstat(trash); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("trash/ still there a minute after the lock was let go")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if target, err := os.Readlink(child); err != nil || target != parent {
		t.Fatalf("the child's directory: %q, %v; want a link to the parent", target, err)
	}
}

// TestWorkspaceSweepRemovesOnlyTrash checks the hidden sweep verb refuses a directory
// that is not a workspace's trash/ and leaves it alone.
func TestWorkspaceSweepRemovesOnlyTrash(t *testing.T) {
	trash := filepath.Join(t.TempDir(), "trash")
	os.MkdirAll(filepath.Join(trash, "keep"), 0o700)
	if _, _, err := runWorkspace(t, "sweep", trash); !errors.Is(err, workspaces.ErrNotWorkspace) {
		t.Fatalf("sweep of a plain directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(trash, "keep")); err != nil {
		t.Fatalf("sweep touched a plain directory: %v", err)
	}
}
