package workspaces

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// besideSuffix ends the name of the copy a hand-back puts beside a path before renaming it
// into place: ".<name>.kennel-handback".
const besideSuffix = ".kennel-handback"

// beside returns the name of the copy made beside the slash path p.
func beside(p string) string {
	dir, name := path.Split(p)
	return dir + "." + name + besideSuffix
}

// applier carries out a hand-back's decisions on the parent.
type applier struct {
	ws     *Workspace
	s      *scanner
	step   func(string) error
	report *reporter
}

func (a *applier) stepf(name string) error { return runStep(a.step, name) }

// runStep calls the test hook step, when not nil, with name; an error it returns ends the
// run, wrapped with the step's name.
func runStep(step func(name string) error, name string) error {
	if step == nil {
		return nil
	}
	if err := step(name); err != nil {
		return fmt.Errorf("step %s: %w", name, err)
	}
	return nil
}

// apply carries out ds: the child's versions of conflicts saved, removals done deepest first (with the directories they empty), then
// takes in path order. It returns the decisions as carried out: a take the parent turned
// out unable to hold (changed since the scan) becomes a conflict.
func (a *applier) apply(ctx context.Context, ds []Decision) ([]Decision, error) {
	out := slices.Clone(ds)
	kept := map[string]bool{} // conflicts: the parent's entry stays, even an empty directory
	for i := range out {
		if out[i].Action == ActionConflict {
			kept[out[i].Path] = true
			if err := a.save(&out[i]); err != nil {
				return nil, err
			}
			a.report.add(1)
		}
	}
	for i := len(out) - 1; i >= 0; i-- {
		d := &out[i]
		if d.Child != nil || (d.Action != ActionRemove && d.Action != ActionSame) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if d.Action == ActionRemove {
			if err := a.remove(d); err != nil {
				return nil, err
			}
		}
		a.tidy(d.Path, kept)
		a.report.add(1)
	}
	for i := range out {
		d := &out[i]
		if d.Action != ActionTake {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := a.take(d); err != nil {
			return nil, err
		}
		a.report.add(1)
	}
	return out, nil
}

// sweep removes the copies a cut run left beside the changed paths, in the parent and in
// conflicts/. The changed paths are the same in every run (the base is fixed and the
// child stopped), so every copy an earlier run made is found.
func (a *applier) sweep(changed []string) error {
	for _, p := range changed {
		if err := a.s.parent.remove(beside(p), false); err != nil && !absent(err) {
			return fmt.Errorf("remove a copy left beside %s: %w", p, err)
		}
		if err := removeIfExists(filepath.Join(a.ws.Conflicts(), filepath.FromSlash(beside(p)))); err != nil && !absent(err) {
			return fmt.Errorf("remove a copy left beside %s: %w", p, err)
		}
	}
	return nil
}

// remove unlinks the parent's file or symlink at d.Path in one step, unless the parent
// changed it since the scan (then it is a conflict).
func (a *applier) remove(d *Decision) error {
	p := d.Path
	if err := a.stepf("remove " + p); err != nil {
		return err
	}
	st, err := a.s.parent.lstat(p)
	if err == nil && kindOf(st.Mode) != KindDir {
		if a.changedSinceScan(p, &st) {
			return a.conflictNow(d, ReasonBothChanged)
		}
		err = a.s.parent.remove(p, false)
	}
	if err != nil && !absent(err) {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return a.stepf("removed " + p)
}

// changedSinceScan reports whether the parent's non-directory entry p (status st now) is
// not the one the scan saw.
func (a *applier) changedSinceScan(p string, st *unix.Stat_t) bool {
	scanned, ok := a.s.parentStat[p]
	return !ok || scanned != fingerprintOf(st)
}

// tidy removes the parent's directories at and above p that are empty, that the child
// does not have and that are not kept, deepest first.
func (a *applier) tidy(p string, kept map[string]bool) {
	dirs := append(ancestors(p), p)
	for _, q := range slices.Backward(dirs) {
		if a.s.childDirs[q] || kept[q] {
			return
		}
		st, err := a.s.parent.lstat(q)
		if err != nil {
			continue
		}
		if kindOf(st.Mode) != KindDir {
			return
		}
		if err := a.s.parent.remove(q, true); err != nil {
			return
		}
	}
}

// take puts the child's entry at d.Path into the parent: its directories made, an empty
// directory there removed, a copy made beside it, then one rename.
func (a *applier) take(d *Decision) error {
	parent, p := a.s.parent, d.Path
	for _, anc := range ancestors(p) {
		st, err := parent.lstat(anc)
		switch {
		case err == nil && kindOf(st.Mode) == KindDir:
			continue
		case err == nil:
			return a.conflictNow(d, ReasonFileInPath)
		case !absent(err):
			return fmt.Errorf("take %s: %w", p, err)
		}
		mode := fs.FileMode(0o755)
		if cst, err := a.s.work.lstat(anc); err == nil && kindOf(cst.Mode) == KindDir {
			mode = permOf(cst.Mode)
		}
		if err := parent.mkdir(anc, mode); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("take %s: %w", p, err)
		}
	}
	st, err := parent.lstat(p)
	scanned, seen := a.s.parentStat[p]
	switch {
	case err == nil && kindOf(st.Mode) == KindDir:
		if !seen || kindOf(scanned.Mode) != KindDir {
			return a.conflictNow(d, ReasonDirectoryThere) // made since the scan
		}
		if err := a.emptyDir(p); err != nil {
			return a.conflictNow(d, ReasonDirectoryThere)
		}
	case err == nil:
		if a.changedSinceScan(p, &st) {
			return a.conflictNow(d, ReasonBothChanged)
		}
	case !absent(err):
		return fmt.Errorf("take %s: %w", p, err)
	case seen && kindOf(scanned.Mode) != KindDir:
		return a.conflictNow(d, ReasonBothChanged) // removed since the scan
	}
	tmp := beside(p)
	if err := parent.remove(tmp, false); err != nil && !absent(err) {
		return fmt.Errorf("take %s: %w", p, err)
	}
	if err := a.copyChild(p, *d.Child, parent, tmp); err != nil {
		return fmt.Errorf("take %s: %w", p, err)
	}
	if err := a.stepf("rename " + p); err != nil {
		return err
	}
	err = parent.at(p, func(dfd int, name string) error {
		return unix.Renameat(dfd, path.Base(tmp), dfd, name)
	})
	if err != nil {
		return fmt.Errorf("take %s: rename: %w", p, err)
	}
	return a.stepf("renamed " + p)
}

// conflictNow turns a take into a conflict found while applying, and saves the child's
// version.
func (a *applier) conflictNow(d *Decision, r Reason) error {
	d.Action, d.Reason = ActionConflict, r
	return a.save(d)
}

// emptyDir removes the parent's directory p when it holds directories only.
func (a *applier) emptyDir(p string) error {
	fd, err := a.s.parent.openat2(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), a.s.parent.abs(p))
	names, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, e := range names {
		if !e.IsDir() {
			return fmt.Errorf("%s: %w", a.s.parent.abs(p), unix.ENOTEMPTY)
		}
		if err := a.emptyDir(p + "/" + e.Name()); err != nil {
			return err
		}
	}
	return a.s.parent.remove(p, true)
}

// save copies the child's version of a conflicting path to conflicts/ through a copy
// beside it and one rename.
func (a *applier) save(d *Decision) error {
	if d.Child == nil || (d.Child.Kind != KindFile && d.Child.Kind != KindSymlink) {
		return nil
	}
	if err := a.stepf("save " + d.Path); err != nil {
		return err
	}
	dst := filepath.Join(a.ws.Conflicts(), filepath.FromSlash(d.Path))
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("save %s: %w", d.Path, err)
	}
	conflicts, err := openRoot(a.ws.Conflicts())
	if err != nil {
		return fmt.Errorf("save %s: %w", d.Path, err)
	}
	defer conflicts.close()
	tmp := beside(d.Path)
	if err := conflicts.remove(tmp, false); err != nil && !absent(err) {
		return fmt.Errorf("save %s: %w", d.Path, err)
	}
	if err := a.copyChild(d.Path, *d.Child, conflicts, tmp); err != nil {
		return fmt.Errorf("save %s: %w", d.Path, err)
	}
	if err := os.Rename(conflicts.abs(tmp), dst); err != nil {
		return fmt.Errorf("save %s: %w", d.Path, err)
	}
	return nil
}

// copyChild makes a copy of the child's entry p (c) at dst in tree t: a clone or copy of
// a file with its mode and times, or a symlink with its target.
func (a *applier) copyChild(p string, c Entry, t *root, dst string) error {
	work := a.s.work
	if c.Kind == KindSymlink {
		target, err := work.readlink(p)
		if err != nil {
			return err
		}
		return t.at(dst, func(dfd int, name string) error { return unix.Symlinkat(target, dfd, name) })
	}
	src, err := a.s.openContent(work, p)
	if err != nil {
		return err
	}
	defer src.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &st); err != nil {
		return err
	}
	return t.at(dst, func(dfd int, name string) error {
		var out unix.Stat_t
		if _, err := cloneAt(dfd, name, int(src.Fd()), st.Mode&0o7777, &st, &out, nil); err != nil {
			return fmt.Errorf("copy %s: %w", src.Name(), err)
		}
		return nil
	})
}
