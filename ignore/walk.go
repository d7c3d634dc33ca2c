package ignore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// MaxDepth is the deepest directory Walk enters (the root's entries are at
// depth 1). Walk holds one descriptor per level, so a hostile tree cannot
// make it hold more than this many.
const MaxDepth = 1024

// ErrTooDeep is returned (wrapped) by Walk for a directory deeper than
// MaxDepth.
var ErrTooDeep = errors.New("directory tree too deep")

// Walk calls fn for every entry under root that is not ignored, with rel
// the slash-separated path relative to root, the way git decides untracked
// files (see Matcher; only .gitignore files count, never .git/info/exclude
// or global excludes).
//
// The order is filepath.WalkDir's: each directory's names sorted, a
// directory before what it holds; root itself is not reported. Walk never
// enters an ignored directory and never reports or enters an entry named
// ".git" (a nested repository's other files are walked like any others).
// It never follows a symlink: a symlink is reported as itself (d.Type() has
// fs.ModeSymlink) and not entered, and each directory is opened relative to
// its parent's descriptor with O_NOFOLLOW, so a tree changed during the
// walk cannot lead it outside root (root itself is opened as named, so a
// symlink given as root is followed). d.Info, if called, is an lstat by
// path.
//
// If fn returns fs.SkipDir for a directory, Walk does not enter it; for a
// file, it skips the rest of that directory. fs.SkipAll ends the walk with
// a nil error. Any other error from fn ends the walk and is returned as is.
// Walk also ends with the error (wrapped) of a directory or .gitignore it
// cannot read, ErrTooDeep, or ctx's error when ctx ends.
func Walk(ctx context.Context, root string, fn func(rel string, d fs.DirEntry) error) error {
	dir, err := os.OpenFile(root, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return fmt.Errorf("ignore walk %s: %w", root, err)
	}
	defer dir.Close()
	w := walker{ctx: ctx, fn: fn, offs: make([]int, 0, 32)}
	err = w.walkDir(dir, "", nil)
	if errors.Is(err, fs.SkipAll) {
		return nil
	}
	return err
}

// walker is the state of one Walk.
type walker struct {
	ctx  context.Context
	fn   func(rel string, d fs.DirEntry) error
	offs []int // byte offsets of the components of the entry being decided
}

// walkDir walks the open directory dir, at rel with depth len(w.offs),
// under the rules parent of the directories above it.
func (w *walker) walkDir(dir *os.File, rel string, parent *rules) error {
	if err := w.ctx.Err(); err != nil {
		return fmt.Errorf("ignore walk %s: %w", dir.Name(), err)
	}
	depth := len(w.offs)
	entries, err := dir.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("ignore walk %s: %w", dir.Name(), err)
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	r := parent
	if _, found := slices.BinarySearchFunc(entries, ".gitignore", func(e fs.DirEntry, name string) int {
		return strings.Compare(e.Name(), name)
	}); found {
		ps, err := readIgnoreAt(int(dir.Fd()), dir.Name())
		if err != nil {
			return fmt.Errorf("ignore walk: %w", err)
		}
		if len(ps) > 0 {
			r = &rules{parent: parent, depth: depth, patterns: ps}
		}
	}
	for i, d := range entries {
		if i%256 == 255 {
			if err := w.ctx.Err(); err != nil {
				return fmt.Errorf("ignore walk %s: %w", dir.Name(), err)
			}
		}
		name := d.Name()
		if name == ".git" {
			continue
		}
		isDir := d.IsDir()
		childRel, start := name, 0
		if rel != "" {
			childRel, start = rel+"/"+name, len(rel)+1
		}
		w.offs = append(w.offs[:depth], start)
		if r.ignored(childRel, w.offs, isDir) {
			continue
		}
		if err := w.fn(childRel, d); err != nil {
			if err == fs.SkipDir {
				if isDir {
					continue
				}
				return nil
			}
			return err
		}
		if !isDir {
			continue
		}
		if depth+1 > MaxDepth {
			return fmt.Errorf("ignore walk %s: %w", childRel, ErrTooDeep)
		}
		child, err := openDirAt(int(dir.Fd()), name, filepath.Join(dir.Name(), name))
		if err != nil {
			return fmt.Errorf("ignore walk: %w", err)
		}
		err = w.walkDir(child, childRel, r)
		child.Close()
		w.offs = w.offs[:depth]
		if err != nil {
			return err
		}
	}
	return nil
}
