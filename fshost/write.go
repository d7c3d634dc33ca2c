package fshost

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kennel-dev/kennel/fshost/fsroot"
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

// Write serves fs.write: the whole file replaced atomically (fsroot.Root.WriteFile),
// parent directories created, an existing file's mode and owner kept; with a path map, a
// new file and the directories made for it belong to its Owner (pathmap.Config.Owner).
// A read-only directory refuses with reason read_only and nothing is written. A full
// file system or used-up quota answers code no_space naming the path: the file keeps its
// old content and no partial file or new directory is left.
func (s *Server) Write(ctx context.Context, a WriteArgs) (*WriteResult, error) {
	if a.Path == "" {
		return nil, fail(TypeWrite, "", fsroot.ErrInvalid, "path is required")
	}
	before, err := s.root.WriteFile(ctx, a.Cwd, a.Path, []byte(a.Content))
	if err != nil {
		return nil, err
	}
	return &WriteResult{Absolute: before.Path, Bytes: len(a.Content), Created: !before.Exists}, nil
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
// Everything is checked before anything changes: every path is resolved, every
// directory involved is writable, the file is text, each edit's old text occurs exactly
// once in the text the previous edits left (else fsroot.ErrNoMatch or ErrAmbiguous,
// naming the edit), and the moves make sense in order (each source exists or was made by
// an earlier move, each destination is free). Then the new text is written atomically,
// as fs.write writes (owner and mode kept; no_space on a full disk, with nothing
// changed), and the moves are done one by one (fsroot.Root.Rename; the directories they
// make belong to a path map's Owner). Only a move that fails in that second phase (the
// tree changed meanwhile, the disk filled) can leave the edit half done; the error says
// which move failed.
func (s *Server) Edit(ctx context.Context, a EditArgs) (*EditResult, error) {
	const op = TypeEdit
	if len(a.Edits) == 0 && len(a.Moves) == 0 {
		return nil, fail(op, a.Path, fsroot.ErrInvalid, "no edits and no moves")
	}
	res := &EditResult{Moves: []MoveResult{}}
	var newText []byte
	if len(a.Edits) > 0 {
		if a.Path == "" {
			return nil, fail(op, "", fsroot.ErrInvalid, "path is required with edits")
		}
		var err error
		res.Absolute, newText, err = s.planEdits(ctx, a)
		if err != nil {
			return nil, err
		}
		res.Replacements = len(a.Edits)
	}
	moves, err := s.planMoves(ctx, a)
	if err != nil {
		return nil, err
	}
	if newText != nil {
		if _, err := s.root.WriteFile(ctx, a.Cwd, res.Absolute, newText); err != nil {
			return nil, err
		}
	}
	for i, mv := range a.Moves {
		if err := s.root.Rename(ctx, a.Cwd, mv.From, mv.To); err != nil {
			return nil, moveErr(i, err)
		}
		res.Moves = append(res.Moves, moves[i])
	}
	return res, nil
}

// moveErr says which move an error is about.
func moveErr(i int, err error) error {
	if fe, ok := err.(*fsroot.Error); ok {
		c := *fe
		c.Op = TypeEdit + " move " + strconv.Itoa(i)
		return &c
	}
	return err
}

// planEdits reads the file and applies the edits in memory; it returns the file's
// sandbox path and its new text.
func (s *Server) planEdits(ctx context.Context, a EditArgs) (string, []byte, error) {
	const op = TypeEdit
	f, info, err := s.root.Open(ctx, a.Cwd, a.Path)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	if info.ReadOnly {
		return "", nil, fail(op, info.Path, fsroot.ErrReadOnly, "")
	}
	text, err := io.ReadAll(io.LimitReader(f, int64(s.opts.MaxEditBytes)+1))
	if err != nil {
		return "", nil, fail(op, info.Path, errClass(err), "%v", err)
	}
	if len(text) > s.opts.MaxEditBytes {
		return "", nil, fail(op, info.Path, fsroot.ErrTooLarge, "over %d bytes", s.opts.MaxEditBytes)
	}
	if hasNUL(text, 0) || !utf8.Valid(text) {
		return "", nil, fail(op, info.Path, fsroot.ErrBinary, "")
	}
	for i, e := range a.Edits {
		if e.Old == "" {
			return "", nil, fail(op, info.Path, fsroot.ErrInvalid, "edit %d: old text is empty", i)
		}
		old := []byte(e.Old)
		at := bytes.Index(text, old)
		if at < 0 {
			return "", nil, fail(op, info.Path, fsroot.ErrNoMatch, "edit %d", i)
		}
		if bytes.Contains(text[at+1:], old) {
			return "", nil, fail(op, info.Path, fsroot.ErrAmbiguous, "edit %d", i)
		}
		text = slices.Concat(text[:at], []byte(e.New), text[at+len(old):])
	}
	return info.Path, text, nil
}

// planMoves checks the moves in order against the tree as the earlier moves leave it,
// and returns what each will report.
func (s *Server) planMoves(ctx context.Context, a EditArgs) ([]MoveResult, error) {
	gone := map[string]bool{} // sandbox paths moved away
	made := map[string]bool{} // sandbox paths moved to
	out := make([]MoveResult, 0, len(a.Moves))
	for i, mv := range a.Moves {
		if mv.From == "" || mv.To == "" {
			return nil, fail(TypeEdit+" move "+strconv.Itoa(i), "", fsroot.ErrInvalid, "from and to are required")
		}
		from, err := s.root.Lstat(ctx, a.Cwd, mv.From)
		if err != nil {
			return nil, moveErr(i, err)
		}
		to, err := s.root.Lstat(ctx, a.Cwd, mv.To)
		if err != nil {
			return nil, moveErr(i, err)
		}
		fp, tp := from.Path, to.Path
		switch {
		case from.ReadOnly:
			return nil, moveErr(i, fail(TypeEdit, fp, fsroot.ErrReadOnly, ""))
		case to.ReadOnly:
			return nil, moveErr(i, fail(TypeEdit, tp, fsroot.ErrReadOnly, ""))
		case !made[fp] && (gone[fp] || !from.Exists):
			return nil, moveErr(i, fail(TypeEdit, fp, fsroot.ErrNotFound, ""))
		case !gone[tp] && (made[tp] || to.Exists):
			return nil, moveErr(i, fail(TypeEdit, tp, fsroot.ErrExists, ""))
		case fp == tp || strings.HasPrefix(tp, fp+"/"):
			return nil, moveErr(i, fail(TypeEdit, tp, fsroot.ErrInvalid, "cannot move a path into itself"))
		}
		delete(made, fp)
		gone[fp] = true
		delete(gone, tp)
		made[tp] = true
		out = append(out, MoveResult{Source: fp, Destination: tp})
	}
	return out, nil
}
