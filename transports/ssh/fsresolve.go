package ssh

import (
	"cmp"
	"context"
	"errors"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/kennel-dev/kennel/fshost/fsroot"
)

// resolved is a path resolved on the host: the real path of its deepest existing part
// and the names below it that do not exist.
type resolved struct {
	info fsroot.Info
	base string      // real path of the deepest existing part (no symlinks)
	tail []string    // missing names below base; the last is the path's own when missing
	mode fs.FileMode // the mode of what is at base
	size int64       // its size
	sys  any         // its attributes (*sftp.FileStat)
}

// resolve resolves unsafePath (relative to cwd, "" being the workspace) as the kernel
// would walk it on the host, refusing what leads outside the workspace. With entry the
// last component is looked up, not followed.
func (f *FS) resolve(ctx context.Context, cwd, unsafePath string, entry bool) (resolved, error) {
	if err := ctx.Err(); err != nil {
		return resolved{}, err
	}
	if err := fsroot.CheckPath("map", unsafePath); err != nil {
		return resolved{}, err
	}
	base, display := f.root, unsafePath
	if cwd != "" {
		if err := fsroot.CheckPath("cwd", cwd); err != nil {
			return resolved{}, err
		}
		if !path.IsAbs(cwd) {
			return resolved{}, fsroot.NewError("cwd", cwd, fsroot.ErrInvalid, errors.New("cwd must be an absolute sandbox path"))
		}
		d, err := f.locate("cwd", cwd, cwd)
		switch {
		case err != nil:
			return resolved{}, err
		case !within(f.root, d.base):
			return resolved{}, fsroot.NewError("cwd", cwd, fsroot.ErrOutside, nil)
		case len(d.tail) > 0:
			return resolved{}, fsroot.NewError("cwd", cwd, fsroot.ErrNotFound, nil)
		case !d.mode.IsDir():
			return resolved{}, fsroot.NewError("cwd", cwd, fsroot.ErrNotFound, errors.New("not a directory"))
		}
		base = d.base
	}
	// Not cleaned by name: ".." after a symlink goes up from where the link leads, as in
	// the kernel, so the server resolves the path as written.
	p := unsafePath
	if !path.IsAbs(p) {
		display = path.Join(cwd, unsafePath)
		if cwd == "" {
			display = path.Join(f.root, unsafePath)
		}
		p = strings.TrimSuffix(base, "/") + "/" + p
	}
	var name string // the entry's own name
	if entry {
		if p, name = splitLast(p); name == "" || name == "." || name == ".." {
			return resolved{}, fsroot.NewError("map", display, fsroot.ErrInvalid, errors.New("path names no directory entry"))
		}
	}
	r, err := f.locate("map", display, p)
	if err != nil {
		return resolved{}, err
	}
	if entry && len(r.tail) == 0 && join(r.base, name) == f.root {
		return resolved{}, fsroot.NewError("map", display, fsroot.ErrInvalid, errors.New("path names the workspace root"))
	}
	switch needDir := strings.HasSuffix(p, "/") || strings.HasSuffix(p, "/.") || strings.HasSuffix(p, "/.."); {
	case !within(f.root, r.base):
		return resolved{}, fsroot.NewError("map", display, fsroot.ErrOutside, nil)
	case !r.mode.IsDir() && (len(r.tail) > 0 || entry || needDir): // entry: p is its parent
		return resolved{}, fsroot.NewError("map", display, fsroot.ErrNotFound, errors.New("not a directory"))
	}
	if entry {
		if len(r.tail) == 0 {
			fi, err := f.c.Lstat(join(r.base, name))
			switch {
			case err == nil:
				r.base, r.mode, r.size, r.sys = join(r.base, name), fi.Mode(), fi.Size(), fi.Sys()
			case errors.Is(err, fs.ErrNotExist):
				r.tail = []string{name}
			default:
				return resolved{}, sftpErr("map", display, err)
			}
		} else {
			r.tail = append(r.tail, name)
		}
	}
	r.info = fsroot.Info{Path: r.base, Exists: len(r.tail) == 0, ReadOnly: f.readOnly}
	for _, n := range r.tail {
		r.info.Path = join(r.info.Path, n)
	}
	if r.info.Exists {
		r.info.Type = r.mode.Type()
		if r.mode.IsRegular() {
			r.info.Size = r.size
		}
	}
	return r, nil
}

// locate finds the deepest existing part of the absolute path p on the host, every
// symlink followed (a dangling one by reading it here), and the missing names below it,
// which must be plain names. It does not check where the path leads.
func (f *FS) locate(op, display, p string) (resolved, error) {
	var tail []string // missing names, the last one first
	for hops := 0; ; {
		if real, err := f.c.RealPath(p); err == nil {
			if fi, err := f.c.Lstat(real); err == nil {
				slices.Reverse(tail)
				return resolved{base: real, tail: tail, mode: fi.Mode(), size: fi.Size(), sys: fi.Sys()}, nil
			}
		}
		parent, name := splitLast(p)
		if fi, err := f.c.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			// A dangling symlink (realpath found nothing at its end): follow it here, so
			// that a write through it creates its target, or is refused if that is outside.
			if hops++; hops > fsroot.MaxSymlinks {
				return resolved{}, fsroot.NewError(op, display, fsroot.ErrLoop, nil)
			}
			target, err := f.c.ReadLink(p)
			if err != nil {
				return resolved{}, sftpErr(op, display, err)
			}
			if !path.IsAbs(target) {
				dir, err := f.c.RealPath(parent)
				if err != nil {
					return resolved{}, sftpErr(op, display, err)
				}
				target = strings.TrimSuffix(dir, "/") + "/" + target
			}
			p = target
			continue
		}
		switch name {
		case "":
			return resolved{}, fsroot.NewError(op, display, fsroot.ErrNotFound, nil)
		case "..":
			// ".." below a missing name: the kernel would not find it either.
			return resolved{}, fsroot.NewError(op, display, fsroot.ErrNotFound, nil)
		case ".":
		default:
			tail = append(tail, name)
		}
		p = parent
	}
}

// makeParents makes the missing directories of r's tail but its last name, one Mkdir
// at a time below its existing part; undo removes them again (if still empty).
func (f *FS) makeParents(op string, r resolved) (undo func(), err error) {
	var made []string
	undo = func() {
		for i := len(made) - 1; i >= 0; i-- {
			_ = f.c.RemoveDirectory(made[i])
		}
	}
	dir := r.base
	for _, n := range r.tail[:max(0, len(r.tail)-1)] {
		dir = join(dir, n)
		if err := f.c.Mkdir(dir); err != nil {
			if fi, serr := f.c.Lstat(dir); serr == nil && fi.IsDir() {
				continue
			}
			undo()
			return func() {}, sftpErr(op, r.info.Path, err)
		}
		made = append(made, dir)
	}
	return undo, nil
}

// splitLast splits an absolute path by name into its parent and its last component
// ("" for "/").
func splitLast(p string) (parent, name string) {
	t := strings.TrimRight(p, "/")
	i := strings.LastIndexByte(t, '/')
	if i < 0 {
		return "/", ""
	}
	return cmp.Or(t[:i], "/"), t[i+1:]
}

// join appends a name to an absolute directory path.
func join(dir, name string) string { return strings.TrimSuffix(dir, "/") + "/" + name }

// within reports whether p is root or below it.
func within(root, p string) bool {
	return p == root || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}

// sftpErr classifies an SFTP error as an fsroot class for op on the sandbox path p.
func sftpErr(op, p string, err error) error {
	c := fsroot.ErrInternal
	switch {
	case errors.Is(err, fs.ErrNotExist):
		c = fsroot.ErrNotFound
	case errors.Is(err, fs.ErrPermission):
		c = fsroot.ErrDenied
	}
	return fsroot.NewError(op, p, c, err)
}
