package fshost

import (
	"bytes"
	"context"
	"io"
	"strconv"
	"strings"

	"github.com/kennel-dev/kennel/pathmap"
)

// WriteArgs are the arguments of fs.write.
type WriteArgs struct {
	// Path is the file's sandbox path, absolute or relative to Cwd. Required.
	Path string `json:"path"`
	// Content is the file's whole new content.
	Content string `json:"content"`
	// Cwd is the request's working directory (a sandbox path); "" means the session's.
	Cwd string `json:"cwd"`
}

// WriteResult is the reply of fs.write.
type WriteResult struct {
	// Absolute is the sandbox path of the file written (symlinks followed).
	Absolute string `json:"absolute"`
	// Bytes is the size written.
	Bytes int `json:"bytes"`
	// Created reports that the file did not exist.
	Created bool `json:"created"`
}

// Write serves fs.write: the whole file replaced atomically (pathmap.Target.WriteFile),
// parent directories created, an existing file's mode and owner kept; a new file and
// the directories made for it belong to the path map's Owner (pathmap.Config.Owner).
// A read-only mount refuses with reason read_only and nothing is written. A full file
// system or used-up quota answers code no_space naming the path: the file keeps its old
// content and no partial file or new directory is left.
func (s *Server) Write(ctx context.Context, a WriteArgs) (*WriteResult, error) {
	if a.Path == "" {
		return nil, fail(TypeWrite, "", ErrInvalid, "path is required")
	}
	t, err := s.m.Resolve(a.Cwd, a.Path)
	if err != nil {
		return nil, err
	}
	created, err := t.WriteFile([]byte(a.Content))
	if err != nil {
		return nil, err
	}
	return &WriteResult{Absolute: t.Sandbox(), Bytes: len(a.Content), Created: created}, nil
}

// Replacement is one exact-text replacement of fs.edit.
type Replacement struct {
	// Old is the text to find; it must occur exactly once. Empty is invalid.
	Old string `json:"old"`
	// New replaces it.
	New string `json:"new"`
}

// Move is one rename of fs.edit.
type Move struct {
	// From is the entry to move (a symlink moves as itself).
	From string `json:"from"`
	// To is its new path; it must not exist. Missing parent directories are created.
	To string `json:"to"`
}

// EditArgs are the arguments of fs.edit.
type EditArgs struct {
	// Path is the file the edits apply to; required when Edits is not empty.
	Path string `json:"path"`
	// Edits apply in order, each to the text the previous ones left.
	Edits []Replacement `json:"edits"`
	// Moves apply in order, after the edits.
	Moves []Move `json:"moves"`
	// Cwd is the request's working directory (a sandbox path); "" means the session's.
	Cwd string `json:"cwd"`
}

// MoveResult is one move done by fs.edit, in sandbox paths.
type MoveResult struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

// EditResult is the reply of fs.edit.
type EditResult struct {
	// Absolute is the sandbox path of the file edited, or "" with no edits.
	Absolute string `json:"absolute,omitempty"`
	// Replacements is how many edits were applied.
	Replacements int `json:"replacements"`
	// Moves lists the moves done.
	Moves []MoveResult `json:"moves"`
}

// Edit serves fs.edit: exact-text replacements in one file, then renames.
//
// Everything is checked before anything changes: every path is resolved, every mount
// involved is writable, the file is text, each edit's old text occurs exactly once in the
// text the previous edits left (else ErrNoMatch or ErrAmbiguous, naming the edit), and
// the moves make sense in order (each source exists or was made by an earlier move, each
// destination is free). Then the new text is written atomically, as fs.write writes
// (owner and mode kept; no_space on a full disk, with nothing changed), and the moves are
// done one by one (pathmap.Rename; the directories they make belong to the path map's
// Owner). Only a move that fails in that second phase (the tree changed meanwhile, the
// disk filled) can leave the edit half done; the error says which move failed.
func (s *Server) Edit(ctx context.Context, a EditArgs) (*EditResult, error) {
	const op = TypeEdit
	if len(a.Edits) == 0 && len(a.Moves) == 0 {
		return nil, fail(op, a.Path, ErrInvalid, "no edits and no moves")
	}
	res := &EditResult{Moves: []MoveResult{}}
	var target pathmap.Target
	var newText []byte
	if len(a.Edits) > 0 {
		if a.Path == "" {
			return nil, fail(op, "", ErrInvalid, "path is required with edits")
		}
		var err error
		target, newText, err = s.planEdits(a)
		if err != nil {
			return nil, err
		}
		res.Absolute, res.Replacements = target.Sandbox(), len(a.Edits)
	}
	if err := s.planMoves(a); err != nil {
		return nil, err
	}
	if newText != nil {
		if _, err := target.WriteFile(newText); err != nil {
			return nil, err
		}
	}
	for i, mv := range a.Moves {
		from, err := s.m.ResolveEntry(a.Cwd, mv.From)
		if err != nil {
			return nil, moveErr(i, err)
		}
		to, err := s.m.ResolveEntry(a.Cwd, mv.To)
		if err != nil {
			return nil, moveErr(i, err)
		}
		if err := pathmap.Rename(from, to); err != nil {
			return nil, moveErr(i, err)
		}
		res.Moves = append(res.Moves, MoveResult{Source: from.Sandbox(), Destination: to.Sandbox()})
	}
	return res, nil
}

// moveErr says which move an error is about.
func moveErr(i int, err error) error {
	if fe, ok := err.(*pathmap.FsError); ok {
		c := *fe
		c.Op = TypeEdit + " move " + strconv.Itoa(i)
		return &c
	}
	return err
}

// planEdits reads the file and applies the edits in memory.
func (s *Server) planEdits(a EditArgs) (pathmap.Target, []byte, error) {
	const op = TypeEdit
	f, t, err := s.m.Open(a.Cwd, a.Path)
	if err != nil {
		return t, nil, err
	}
	defer f.Close()
	if t.ReadOnly() {
		return t, nil, fail(op, t.Sandbox(), pathmap.ErrReadOnly, "")
	}
	text, err := io.ReadAll(io.LimitReader(f, int64(s.opts.MaxEditBytes)+1))
	if err != nil {
		return t, nil, fail(op, t.Sandbox(), errClass(err), "%v", err)
	}
	if len(text) > s.opts.MaxEditBytes {
		return t, nil, fail(op, t.Sandbox(), ErrTooLarge, "over %d bytes", s.opts.MaxEditBytes)
	}
	if hasNUL(text, 0) || !validUTF8(text) {
		return t, nil, fail(op, t.Sandbox(), ErrBinary, "")
	}
	for i, e := range a.Edits {
		if e.Old == "" {
			return t, nil, fail(op, t.Sandbox(), ErrInvalid, "edit %d: old text is empty", i)
		}
		old := []byte(e.Old)
		at := bytes.Index(text, old)
		if at < 0 {
			return t, nil, fail(op, t.Sandbox(), ErrNoMatch, "edit %d", i)
		}
		if bytes.Index(text[at+1:], old) >= 0 {
			return t, nil, fail(op, t.Sandbox(), ErrAmbiguous, "edit %d", i)
		}
		next := make([]byte, 0, len(text)-len(old)+len(e.New))
		next = append(append(append(next, text[:at]...), e.New...), text[at+len(old):]...)
		text = next
	}
	return t, text, nil
}

// planMoves checks the moves in order against the tree as the earlier moves leave it.
func (s *Server) planMoves(a EditArgs) error {
	gone := map[string]bool{} // sandbox paths moved away
	made := map[string]bool{} // sandbox paths moved to
	for i, mv := range a.Moves {
		if mv.From == "" || mv.To == "" {
			return fail(TypeEdit+" move "+strconv.Itoa(i), "", ErrInvalid, "from and to are required")
		}
		from, err := s.m.ResolveEntry(a.Cwd, mv.From)
		if err != nil {
			return moveErr(i, err)
		}
		to, err := s.m.ResolveEntry(a.Cwd, mv.To)
		if err != nil {
			return moveErr(i, err)
		}
		fp, tp := from.Sandbox(), to.Sandbox()
		switch {
		case from.ReadOnly():
			return moveErr(i, fail(TypeEdit, fp, pathmap.ErrReadOnly, ""))
		case to.ReadOnly():
			return moveErr(i, fail(TypeEdit, tp, pathmap.ErrReadOnly, ""))
		case !made[fp] && (gone[fp] || !from.Exists()):
			return moveErr(i, fail(TypeEdit, fp, pathmap.ErrNotFound, ""))
		case !gone[tp] && (made[tp] || to.Exists()):
			return moveErr(i, fail(TypeEdit, tp, pathmap.ErrExists, ""))
		case fp == tp || strings.HasPrefix(tp, fp+"/"):
			return moveErr(i, fail(TypeEdit, tp, ErrInvalid, "cannot move a path into itself"))
		}
		delete(made, fp)
		gone[fp] = true
		delete(gone, tp)
		made[tp] = true
	}
	return nil
}
