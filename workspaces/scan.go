package workspaces

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/kennel-dev/kennel/ignore"
)

// The content labels of the listings a hand-back gives Plan. A path's entries in the three
// trees are compared on disk (by stat where it proves sameness, else byte by byte), then
// labelled so that equal labels mean equal content at that path.
const (
	labelBase   = "base"
	labelChild  = "child"
	labelParent = "parent"
)

// scanner lists the three trees of a hand-back into labelled listings.
type scanner struct {
	man                *manifest
	base, work, parent *root
	// read is told of every read of file content (nil: nobody asks).
	read func(name string, n int)

	child     map[string]unix.Stat_t // the child's files, symlinks and special files
	childDirs map[string]bool        // the child's directories (not ignored)
	// parentStat holds the stat of each parent entry the scan looked at, so the apply
	// can tell one the parent changed since.
	parentStat map[string]fingerprint

	baseL, parentL, childL Listing
}

// scanChild lists the child's copy: the walk of its .gitignore files finds new paths, and
// every path of the manifest is looked at whatever the child's .gitignore says (a file the
// base had is never taken for removed because the child ignores it now).
func (s *scanner) scanChild(ctx context.Context) error {
	s.child = map[string]unix.Stat_t{}
	s.childDirs = map[string]bool{}
	err := ignore.Walk(ctx, s.work.path, func(rel string, d fs.DirEntry) error {
		if d.IsDir() {
			s.childDirs[rel] = true
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if absent(err) {
				return nil
			}
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("lstat %s: no stat", rel)
		}
		s.child[rel] = unixStat(st)
		return nil
	})
	if err != nil {
		return fmt.Errorf("list child: %w", err)
	}
	for i := range s.man.entries {
		p := s.man.entries[i].Path
		if _, seen := s.child[p]; seen {
			continue
		}
		st, err := s.work.lstat(p)
		if err != nil {
			if absent(err) {
				continue
			}
			return fmt.Errorf("list child: %w", err)
		}
		if kindOf(st.Mode) != KindDir {
			s.child[p] = st
		}
	}
	return nil
}

// unixStat converts the stat the walk read into the x/sys form.
func unixStat(st *syscall.Stat_t) unix.Stat_t {
	return unix.Stat_t{
		Dev: st.Dev, Ino: st.Ino, Mode: st.Mode, Size: st.Size,
		Mtim: unix.Timespec{Sec: st.Mtim.Sec, Nsec: st.Mtim.Nsec},
		Ctim: unix.Timespec{Sec: st.Ctim.Sec, Nsec: st.Ctim.Nsec},
	}
}

// labelChild builds the base and child listings and returns the paths the child changed.
// Paths the child did not change get equal entries in both.
func (s *scanner) labelChild() ([]string, error) {
	s.baseL, s.childL = Listing{}, Listing{}
	for d := range s.childDirs {
		s.childL[d] = Entry{Kind: KindDir}
	}
	var changed []string
	for i := range s.man.entries {
		m := &s.man.entries[i]
		b := baseEntry(m)
		s.baseL[m.Path] = b
		st, ok := s.child[m.Path]
		if !ok {
			changed = append(changed, m.Path)
			continue
		}
		eq, err := s.sameAsBase(m, s.work, &st, m.Child, m.Child.Ctime >= s.man.End)
		if err != nil {
			return nil, err
		}
		if eq {
			s.childL[m.Path] = b
		} else {
			s.childL[m.Path] = entryOf(&st, labelChild)
			changed = append(changed, m.Path)
		}
	}
	for p, st := range s.child {
		if s.man.get(p) == nil {
			s.childL[p] = entryOf(&st, labelChild)
			changed = append(changed, p)
		}
	}
	slices.Sort(changed)
	return changed, nil
}

// labelParent builds the parent listing for the changed paths: each path itself, its
// directories, and all that lies below it when it is a directory there. Plan asks about
// nothing else.
func (s *scanner) labelParent(changed []string) error {
	s.parentL, s.parentStat = Listing{}, map[string]fingerprint{}
	seen := map[string]bool{}
	for _, p := range changed {
		if err := s.labelParentAt(p, seen); err != nil {
			return err
		}
		if e := s.parentL.get(p); e != nil && e.Kind == KindDir {
			if err := s.labelParentBelow(p, seen); err != nil {
				return err
			}
		}
		for _, a := range ancestors(p) {
			if err := s.labelParentAt(a, seen); err != nil {
				return err
			}
			if _, ok := s.parentL[a]; !ok {
				break // nothing deeper exists
			}
		}
	}
	return nil
}

// baseEntry is the base's entry for a manifest entry.
func baseEntry(m *mentry) Entry {
	e := Entry{Kind: m.Kind, Content: labelBase}
	if m.Kind == KindFile {
		e.Mode = m.Mode
	}
	return e
}

// entryOf is the entry for st with content label l.
func entryOf(st *unix.Stat_t, l string) Entry {
	e := Entry{Kind: kindOf(st.Mode)}
	switch e.Kind {
	case KindFile:
		e.Mode, e.Content = permOf(st.Mode), l
	case KindSymlink, KindOther:
		e.Content = l
	}
	return e
}

// labelParentAt adds the parent's entry at p (if any) to the parent listing.
func (s *scanner) labelParentAt(p string, seen map[string]bool) error {
	if seen[p] {
		return nil
	}
	seen[p] = true
	st, err := s.parent.lstat(p)
	if err != nil {
		if absent(err) {
			return nil
		}
		return fmt.Errorf("list parent: %w", err)
	}
	e, err := s.parentEntry(p, &st)
	if err != nil {
		return err
	}
	s.parentL[p] = e
	s.parentStat[p] = fingerprintOf(&st)
	return nil
}

// labelParentBelow adds every entry below the parent's directory p, ignored or not (a
// hand-back may only empty a directory it knows all of).
func (s *scanner) labelParentBelow(p string, seen map[string]bool) error {
	top := s.parent.abs(p)
	return filepath.WalkDir(top, func(q string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("list parent: %w", err)
		}
		if q == top {
			return nil
		}
		rel, err := filepath.Rel(s.parent.path, q)
		if err != nil {
			return err
		}
		return s.labelParentAt(filepath.ToSlash(rel), seen)
	})
}

// parentEntry labels the parent's entry at p: the base's label when it is the base's
// content, the child's when it is the child's, its own otherwise.
func (s *scanner) parentEntry(p string, st *unix.Stat_t) (Entry, error) {
	e := entryOf(st, labelParent)
	if e.Kind == KindDir || e.Kind == KindOther {
		return e, nil
	}
	if m := s.man.get(p); m != nil {
		eq, err := s.sameAsBase(m, s.parent, st, m.Parent, m.Parent.Ctime >= s.man.Start)
		if err != nil || eq {
			return baseEntry(m), err
		}
	}
	if c := s.childL.get(p); c != nil && c.Content == labelChild && c.Kind == e.Kind && c.Mode == e.Mode {
		eq, err := s.sameContent(p, s.parent, st, s.work, s.child[p])
		if err != nil || eq {
			return *c, err
		}
	}
	return e, nil
}

// sameAsBase reports whether the entry at p in tree t (status st) holds the base's
// content: the same stat as recorded, unless the record is racy (then nothing is read),
// else the same kind, mode, size and bytes (or target; or SHA-256, for a base kept as a
// digest).
func (s *scanner) sameAsBase(m *mentry, t *root, st *unix.Stat_t, recorded fingerprint, racy bool) (bool, error) {
	k := kindOf(st.Mode)
	if k != m.Kind || (k == KindFile && permOf(st.Mode) != m.Mode) {
		return false, nil
	}
	if fingerprintOf(st) == recorded && !racy {
		return true, nil
	}
	if st.Size != m.Size {
		return false, nil
	}
	if k == KindSymlink {
		target, err := t.readlink(m.Path)
		if err != nil {
			return false, fmt.Errorf("compare %s: %w", m.Path, err)
		}
		return target == m.Target, nil
	}
	if m.HasDigest {
		f, err := s.openContent(t, m.Path)
		if err != nil {
			return false, fmt.Errorf("compare %s with the base: %w", m.Path, err)
		}
		defer f.Close()
		d, err := digestOf(f, s.read)
		return err == nil && d == m.Digest, err
	}
	bst, err := s.base.lstat(m.Path)
	if err != nil {
		return false, fmt.Errorf("compare %s with the base: %w", m.Path, err)
	}
	return s.sameContent(m.Path, t, st, s.base, bst)
}

// sameContent compares the files or symlinks at p in trees a and b (of kind and mode
// already known equal) by size and bytes, or by target.
func (s *scanner) sameContent(p string, a *root, ast *unix.Stat_t, b *root, bst unix.Stat_t) (bool, error) {
	if kindOf(ast.Mode) != kindOf(bst.Mode) || ast.Size != bst.Size {
		return false, nil
	}
	if kindOf(ast.Mode) == KindSymlink {
		ta, err := a.readlink(p)
		if err != nil {
			return false, fmt.Errorf("compare %s: %w", p, err)
		}
		tb, err := b.readlink(p)
		if err != nil {
			return false, fmt.Errorf("compare %s: %w", p, err)
		}
		return ta == tb, nil
	}
	fa, err := s.openContent(a, p)
	if err != nil {
		return false, fmt.Errorf("compare %s: %w", p, err)
	}
	defer fa.Close()
	fb, err := s.openContent(b, p)
	if err != nil {
		return false, fmt.Errorf("compare %s: %w", p, err)
	}
	defer fb.Close()
	return sameBytes(fa, fb, s.read)
}

// openContent opens a file to read its bytes, telling s.read.
func (s *scanner) openContent(t *root, p string) (*os.File, error) {
	f, err := t.open(p)
	if err == nil && s.read != nil {
		s.read(f.Name(), 0)
	}
	return f, err
}
