package controller_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/controller"
)

// TestASessionsSpillFilesGoWithIt: a job whose output spills to disk leaves its spill
// file in the session's own directory, and closing the session removes it (the hardening
// issue, item 10: six cells left 98 MB after their sessions and the daemon were gone).
// Saved output (SaveOutput) stays for the age prune.
func TestASessionsSpillFilesGoWithIt(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	s := startJobSession(t, controller.Options{StateDir: state})
	j := runJob(t, s, "head -c 3000000 /dev/zero", controller.JobOptions{})
	settle(t, s, j.ID(), 30*time.Second)
	spill := j.Capture().Stat().SpillPath
	if spill == "" || filepath.Dir(spill) != s.SpillDir() {
		t.Fatalf("spill file %q, want one in the session's directory %s", spill, s.SpillDir())
	}
	saved, err := s.SaveOutput(context.Background(), j.ID())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.SpillDir()); !os.IsNotExist(err) {
		t.Fatalf("the session's spill directory outlived it: %v", err)
	}
	if _, err := os.Stat(saved); err != nil {
		t.Fatalf("the saved output went with the session: %v", err)
	}
}

// TestSweepOutputRemovesTheSpillOfSessionsGone: at a daemon's start SweepOutput removes
// the spill directories of sessions it does not keep, and nothing else (saved output, a
// kept session's directory, a symlink named like one).
func TestSweepOutputRemovesTheSpillOfSessionsGone(t *testing.T) {
	state := t.TempDir()
	out := filepath.Join(state, "output")
	for _, d := range []string{"session-gone", "session-kept", "not-a-session"} {
		if err := os.MkdirAll(filepath.Join(out, d), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, d, "kennel-spill-1"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(out, "kennel-output-1"), []byte("saved"), 0o600); err != nil {
		t.Fatal(err)
	}
	target := t.TempDir()
	if err := os.Symlink(target, filepath.Join(out, "session-link")); err != nil {
		t.Fatal(err)
	}
	n, err := controller.SweepOutput(state, func(id string) bool { return id == "kept" })
	if err != nil || n != 1 {
		t.Fatalf("swept %d, %v; want 1", n, err)
	}
	for name, want := range map[string]bool{"session-gone": false, "session-kept": true, "not-a-session": true, "kennel-output-1": true, "session-link": true} {
		if _, err := os.Lstat(filepath.Join(out, name)); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", name, err == nil, want)
		}
	}
	if _, err := os.Stat(target); err != nil {
		t.Fatalf("the sweep followed a symlink: %v", err)
	}
}
