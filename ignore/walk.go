package ignore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// MaxDepth is the deepest directory Walk and WalkFS enter (the root's
// entries are at depth 1). Walk holds one descriptor per level, so a
// hostile tree cannot make it hold more than this many.
const MaxDepth = 1024

// ErrTooDeep is returned (wrapped) by Walk and WalkFS for a directory
// deeper than MaxDepth.
var ErrTooDeep = errors.New("directory tree too deep")

// Walk calls fn for every entry under root that is not ignored, with rel
// the slash-separated path relative to root, the way git decides untracked
// files (only .gitignore files count, never .git/info/exclude or global
// excludes).
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
// path. A .gitignore that is not a regular file (a symlink is not followed,
// a FIFO is not opened for blocking) or is larger than MaxFileSize counts
// as empty.
//
// If fn returns fs.SkipDir for a directory, Walk does not enter it; for a
// file, it skips the rest of that directory. fs.SkipAll ends the walk with
// a nil error. Any other error from fn ends the walk and is returned as is.
// Walk also ends with the error (wrapped) of a directory or .gitignore it
// cannot read, ErrTooDeep, or ctx's error when ctx ends.
func Walk(ctx context.Context, root string, fn func(rel string, d fs.DirEntry) error) error {
	f, err := os.OpenFile(root, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return fmt.Errorf("ignore walk %s: %w", root, err)
	}
	return walkTree(ctx, localDir{f}, fn)
}

// WalkFS is Walk over the tree at root in fsys (a path as fs.ValidPath
// wants it, "." for the top): the same entries in the same order, decided
// by the same rules, for a tree that is not a local directory (a remote
// one over SFTP, an archive, fstest.MapFS). Only the .gitignore files at
// or below root count; rel is relative to root.
//
// WalkFS lists directories with fs.ReadDir and reads a .gitignore with
// fsys.Open only when its directory entry says it is a regular file, then
// checks the open file's Stat: one that is not regular or is larger than
// MaxFileSize counts as empty, and no more than MaxFileSize+1 bytes of it
// are read. It enters only entries whose type is fs.ModeDir, so it never
// follows a symlink it listed; but names are resolved by fsys, which for
// most file systems follows symlinks on the way, so a tree changed during
// the walk (a directory or a .gitignore swapped for a symlink or a FIFO
// after it was listed) can lead a listing or an open where that symlink
// points, or block in Open. Walk, which opens through descriptors, has no
// such window. fs.FS methods take no context: WalkFS checks ctx between
// directories and every 256 entries, and a call that blocks in fsys is
// bounded only by fsys itself.
//
// fs.SkipDir, fs.SkipAll and errors from fn act as for Walk. WalkFS also
// ends with the error (wrapped) of a directory or .gitignore it cannot read
// (a root that is not a valid path is fs.ErrInvalid), ErrTooDeep, or ctx's
// error when ctx ends.
func WalkFS(ctx context.Context, fsys fs.FS, root string, fn func(rel string, d fs.DirEntry) error) error {
	if !fs.ValidPath(root) {
		return fmt.Errorf("ignore walk %s: %w", root, fs.ErrInvalid)
	}
	return walkTree(ctx, fsDir{fsys: fsys, path: root}, fn)
}

// dir is one directory of the tree being walked, as the walker sees it: a
// local directory held by a descriptor (Walk) or a path in an fs.FS
// (WalkFS). The rules, the order, the skips and the bounds are the
// walker's; a dir only lists and reads.
type dir interface {
	// name names the directory in errors.
	name() string
	// readDir lists the directory's entries, in any order.
	readDir() ([]fs.DirEntry, error)
	// gitignore reads the patterns of the directory's .gitignore, whose
	// entry readDir listed as e; nil when it has none that count (gone
	// since, not a regular file, larger than MaxFileSize).
	gitignore(e fs.DirEntry) ([]pattern, error)
	// sub opens the subdirectory e, an entry readDir listed as a
	// directory, without following a symlink swapped in for it where the
	// source can.
	sub(e fs.DirEntry) (dir, error)
	// close releases what the directory holds.
	close()
}

// walkTree walks the tree whose root is the open directory root, and
// closes it.
func walkTree(ctx context.Context, root dir, fn func(rel string, d fs.DirEntry) error) error {
	defer root.close()
	w := walker{ctx: ctx, fn: fn, offs: make([]int, 0, 32)}
	err := w.walkDir(root, "", nil)
	if errors.Is(err, fs.SkipAll) {
		return nil
	}
	return err
}

// walker is the state of one Walk or WalkFS.
type walker struct {
	ctx  context.Context
	fn   func(rel string, d fs.DirEntry) error
	offs []int // byte offsets of the components of the entry being decided
}

// walkDir walks the open directory d, at rel with depth len(w.offs),
// under the rules parent of the directories above it.
func (w *walker) walkDir(d dir, rel string, parent *rules) error {
	if err := w.ctx.Err(); err != nil {
		return fmt.Errorf("ignore walk %s: %w", d.name(), err)
	}
	depth := len(w.offs)
	entries, err := d.readDir()
	if err != nil {
		return fmt.Errorf("ignore walk %s: %w", d.name(), err)
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	r := parent
	if i, found := slices.BinarySearchFunc(entries, ".gitignore", func(e fs.DirEntry, name string) int {
		return strings.Compare(e.Name(), name)
	}); found {
		ps, err := d.gitignore(entries[i])
		if err != nil {
			return fmt.Errorf("ignore walk: %w", err)
		}
		if len(ps) > 0 {
			r = &rules{parent: parent, depth: depth, patterns: ps}
		}
	}
	for i, e := range entries {
		if i%256 == 255 {
			if err := w.ctx.Err(); err != nil {
				return fmt.Errorf("ignore walk %s: %w", d.name(), err)
			}
		}
		name := e.Name()
		if name == ".git" {
			continue
		}
		isDir := e.IsDir()
		childRel, start := name, 0
		if rel != "" {
			childRel, start = rel+"/"+name, len(rel)+1
		}
		w.offs = append(w.offs[:depth], start)
		if r.ignored(childRel, w.offs, isDir) {
			continue
		}
		if err := w.fn(childRel, e); err != nil {
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
		child, err := d.sub(e)
		if err != nil {
			return fmt.Errorf("ignore walk: %w", err)
		}
		err = w.walkDir(child, childRel, r)
		child.close()
		w.offs = w.offs[:depth]
		if err != nil {
			return err
		}
	}
	return nil
}
