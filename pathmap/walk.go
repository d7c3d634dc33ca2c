package pathmap

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/kennel-dev/kennel/fshost/fsroot"
)

// WalkFunc walks the directory tree at root (a host path), calling fn for every entry
// below root with its slash-separated path relative to root, in a stable order, never
// following a symlink; fs.SkipDir from fn on a directory skips it. ignore.Walk has this
// shape (and skips .git and what .gitignore files ignore).
type WalkFunc func(ctx context.Context, root string, fn func(rel string, d fs.DirEntry) error) error

// walkTarget walks the tree of the directory t as the sandbox sees it: the tree below
// t's host directory, except that a deeper mount's sandbox path shows that mount's tree
// instead of what the host has there. walk lists each tree (nil: every entry); its root
// is given as a descriptor path (/proc/self/fd/N) of the directory checked, so the walk
// starts where the check ended. fn gets the entries; a directory that is another mount's
// place is not reported and not entered. A t that is not a directory yields itself as
// the one entry (Rel is its name). fs.SkipAll from fn ends the walk with nil.
//
// Entries are names only: Map.ReadFile opens them again beneath the mount's root.
func (m *Map) walkTarget(ctx context.Context, t Target, walk WalkFunc, fn func(fsroot.Entry) error) error {
	const op = "walk"
	if t.mnt == nil || t.tail != nil {
		return newErr(op, t.sandboxOrEmpty(), ErrNotFound, nil)
	}
	if walk == nil {
		walk = walkAll
	}
	if t.typ != unix.S_IFDIR {
		err := fn(fsroot.Entry{Path: t.Sandbox(), Rel: path.Base(t.Sandbox()), Type: modeType(t.typ)})
		if err == fs.SkipAll || err == fs.SkipDir {
			return nil
		}
		return err
	}
	type root struct {
		mnt     *mount
		rel     string // below mnt's root
		sandbox string // sandbox path of the root
		prefix  string // Rel of the root, relative to t
	}
	top := t.Sandbox()
	topComps := comps(top)
	roots := []root{{t.mnt, t.rel, top, ""}}
	var nested []root
	for _, mm := range m.mounts {
		if len(mm.sbComps) > len(topComps) && hasPrefix(mm.sbComps, topComps) {
			nested = append(nested, root{mm, "", mm.Sandbox, strings.Join(mm.sbComps[len(topComps):], "/")})
		}
	}
	slices.SortFunc(nested, func(a, b root) int { return strings.Compare(a.sandbox, b.sandbox) })
	roots = append(roots, nested...)
	for _, r := range roots {
		fd, err := openat2(r.mnt.root, r.rel, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, resolveStrict)
		if err != nil {
			if r.mnt == t.mnt && r.rel == t.rel {
				return t.reopenErr(op, err)
			}
			return fromErrno(op, r.sandbox, err)
		}
		hostRoot := "/proc/self/fd/" + strconv.Itoa(fd)
		if _, err := os.Stat(hostRoot); err != nil {
			hostRoot = joinComps(r.mnt.real, split(r.rel)) // no /proc: walk by name
		}
		err = walk(ctx, hostRoot, func(rel string, d fs.DirEntry) error {
			if rel == "" || rel == "." {
				return nil
			}
			sp := r.sandbox + "/" + rel
			if r.sandbox == "/" {
				sp = "/" + rel
			}
			if len(nested) > 0 {
				if _, ok := m.bySandbox[sp]; ok {
					if d.IsDir() {
						return fs.SkipDir
					}
					return nil
				}
			}
			return fn(fsroot.Entry{Path: sp, Rel: relJoin(r.prefix, rel), Type: d.Type()})
		})
		closeFd(fd)
		if err == fs.SkipAll {
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if _, ok := err.(*FsError); ok {
				return err
			}
			var errno syscall.Errno
			if errors.As(err, &errno) {
				return fromErrno(op, r.sandbox, errno) // the walk's own message names host paths
			}
			return newErr(op, r.sandbox, ErrInternal, nil)
		}
	}
	return nil
}

// walkAll is the WalkFunc used when none is given: every entry, in lexical order.
func walkAll(ctx context.Context, root string, fn func(rel string, d fs.DirEntry) error) error {
	fsys := os.DirFS(root)
	return fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		return fn(p, d)
	})
}

// sandboxOrEmpty is Sandbox, or "" for a zero Target.
func (t Target) sandboxOrEmpty() string {
	if t.mnt == nil {
		return ""
	}
	return t.Sandbox()
}

// modeType converts S_IFMT bits to fs.FileMode type bits.
func modeType(typ uint32) fs.FileMode {
	switch typ {
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	}
	return 0
}

// openBeneath opens rel beneath dirfd for reading, non-blocking (a FIFO or device found
// there is not waited on) and with no symlink on the way, and returns its stat for the
// caller to check. name is the sandbox path for errors.
func openBeneath(dirfd int, rel, name string) (int, unix.Stat_t, error) {
	const op = "open"
	fd, err := openat2(dirfd, rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_NOCTTY, 0, resolveStrict)
	if err != nil {
		return -1, unix.Stat_t{}, reopenErrno(op, name, err)
	}
	st, err := fstat(fd)
	if err != nil {
		closeFd(fd)
		return -1, st, fromErrno(op, name, err)
	}
	return fd, st, nil
}

// readAll reads an open regular file of size size into buf's storage, grown as needed:
// at most max bytes (more: the file holds more). It uses plain read(2) calls, no
// *os.File, and stops once it has the size fstat reported (a file that grows meanwhile
// is read to that size; one that reports size 0, as /proc files do, is read to its end).
func readAll(fd int, name string, size int64, buf []byte, max int) (data []byte, more bool, err error) {
	data = buf[:0]
	if want := int(min(size+1, int64(max))); want > cap(data) {
		data = slices.Grow(data, want)
	}
	for {
		if len(data) >= max {
			var one [1]byte
			n, err := readFd(fd, one[:])
			if err != nil {
				return data, false, fromErrno("read", name, err)
			}
			return data, n > 0, nil
		}
		if len(data) == cap(data) {
			data = slices.Grow(data, min(max-len(data), cap(data)+64<<10))
		}
		n, err := readFd(fd, data[len(data):min(cap(data), max)])
		if err != nil {
			return data, false, fromErrno("read", name, err)
		}
		if n == 0 {
			return data, false, nil
		}
		data = data[:len(data)+n]
		if int64(len(data)) == size && size > 0 && len(data) < max {
			return data, false, nil // all fstat reported; no read just to see the end
		}
	}
}

// readFd reads once, retrying EINTR.
func readFd(fd int, p []byte) (int, error) {
	for {
		n, err := unix.Read(fd, p)
		if err != unix.EINTR {
			return max(n, 0), err
		}
	}
}
