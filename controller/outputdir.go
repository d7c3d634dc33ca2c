package controller

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// spillDirPrefix names a session's own output directory inside <state>/output: the
// spill files of its jobs' captures and its jobs' output files. The session id follows.
const spillDirPrefix = "session-"

// removeSpill removes the session's spill directory, once its kernels have ended: what
// its jobs retained goes with the session.
func (s *Session) removeSpill() {
	if s.jobs.spillDir == "" {
		return
	}
	if err := os.RemoveAll(s.jobs.spillDir); err != nil {
		s.log.Warn("removing the session's spill files", "dir", s.jobs.spillDir, "err", err)
	}
}

// SweepOutput removes the spill directories under stateDir (a Options.StateDir) of every
// session for which keep returns false (nil keep: every session), and returns how many it
// removed. A daemon calls it at its start, before it runs a session, so the spill files
// of sessions it no longer has do not outlive them. Saved output (SaveOutput) is left to
// the age prune.
func SweepOutput(stateDir string, keep func(sessionID string) bool) (int, error) {
	dir := filepath.Join(stateDir, "output")
	return removeSpillDirs(dir, func(id string, _ fs.DirEntry) bool { return keep != nil && keep(id) })
}

// pruneSpillDirs removes the spill directories in dir not modified for maxAge (those of
// controllers that died without removing them: a live capture's writes keep its
// directory's files fresh).
func pruneSpillDirs(dir string, maxAge time.Duration) (int, error) {
	cutoff := time.Now().Add(-maxAge)
	return removeSpillDirs(dir, func(_ string, e fs.DirEntry) bool {
		return !untouchedSince(filepath.Join(dir, e.Name()), cutoff)
	})
}

// untouchedSince reports whether dir and every entry in it were last modified before t.
func untouchedSince(dir string, t time.Time) bool {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.ModTime().Before(t) {
		return false
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !info.ModTime().Before(t) {
			return false
		}
	}
	return true
}

// removeSpillDirs removes each directory session-<id> in dir (real directories only, never
// through a symlink) for which keep is false.
func removeSpillDirs(dir string, keep func(id string, e fs.DirEntry) bool) (int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sweep spill dirs %s: %w", dir, err)
	}
	removed := 0
	var errs []error
	for _, e := range entries {
		id, ok := strings.CutPrefix(e.Name(), spillDirPrefix)
		if !ok || !e.IsDir() || keep(id, e) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("sweep spill dir %s: %w", e.Name(), err))
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}
