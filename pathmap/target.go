package pathmap

import (
	"errors"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Target is a sandbox path resolved by Resolve or ResolveEntry: a place below one
// mount's root, reached without leaving the mounts. Its existing part has no symlinks (as
// checked); its missing tail (see Exists) is plain names. The zero Target is not valid.
//
// A Target is a value: it holds no descriptor, and its methods open what they need beneath
// the mount's root again, refusing (ErrChanged) if a symlink appeared on the way since the
// check. Within one mount, a concurrent rename can still make such an open reach another
// file of that mount: the guarantee is that it never leaves the mount's root.
type Target struct {
	m    *Map
	mnt  *mount
	rel  string   // resolved existing part below mnt's root; "" is the root
	tail []string // missing components; nil when the target exists
	typ  uint32   // S_IFMT of the existing part
	dev  uint64   // identity of the existing part, as checked
	ino  uint64
	size int64 // its size, as checked
}

// Sandbox returns the target's sandbox path: its mount's sandbox path joined with the
// resolved path below it (symlinks followed, "." and ".." gone). Replies carry this path.
func (t Target) Sandbox() string { return joinComps(t.mnt.Sandbox, t.below()) }

// Host returns the target's host path below the mount's resolved host directory. It is
// for messages to the operator and for tools outside the sandbox; opening it by name
// would undo the check (use the Target's methods).
func (t Target) Host() string { return joinComps(t.mnt.real, t.below()) }

// below returns the components below the mount root.
func (t Target) below() []string {
	c := split(t.rel)
	return append(c, t.tail...)
}

// Mount returns the mount that holds the target.
func (t Target) Mount() Mount { return t.mnt.Mount }

// ReadOnly reports whether the target's mount is read-only.
func (t Target) ReadOnly() bool { return t.mnt.ReadOnly }

// Exists reports whether the target existed when it was resolved.
func (t Target) Exists() bool { return t.tail == nil }

// IsDir reports whether the target existed as a directory when it was resolved.
func (t Target) IsDir() bool { return t.tail == nil && t.typ == unix.S_IFDIR }

// IsRegular reports whether the target existed as a regular file when it was resolved.
func (t Target) IsRegular() bool { return t.tail == nil && t.typ == unix.S_IFREG }

// IsSymlink reports whether the target is a symlink (only ResolveEntry yields one).
func (t Target) IsSymlink() bool { return t.tail == nil && t.typ == unix.S_IFLNK }

// Open opens the target, a regular file, for reading. The open happens beneath the
// mount's root with no symlink allowed on the way, and the file opened must be the one
// checked (same device and inode), else ErrChanged. A FIFO or device swapped in is never
// read (it is opened non-blocking and refused).
func (t Target) Open() (*os.File, error) {
	const op = "open"
	switch {
	case t.tail != nil:
		return nil, newErr(op, t.Sandbox(), ErrNotFound, nil)
	case t.typ == unix.S_IFDIR:
		return nil, newErr(op, t.Sandbox(), ErrInvalid, detail("is a directory"))
	case t.typ != unix.S_IFREG:
		return nil, newErr(op, t.Sandbox(), ErrInvalid, detail("not a regular file"))
	}
	fd, st, err := openBeneath(t.mnt.root, t.rel, t.Sandbox())
	if err != nil {
		return nil, err
	}
	if fileType(&st) != unix.S_IFREG || st.Dev != t.dev || st.Ino != t.ino {
		closeFd(fd)
		return nil, newErr(op, t.Sandbox(), ErrChanged, nil)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		closeFd(fd)
		return nil, fromErrno(op, t.Sandbox(), err)
	}
	return os.NewFile(uintptr(fd), t.Sandbox()), nil
}

// reopenErr classifies an error from opening a checked target again.
func (t Target) reopenErr(op string, err error) error { return reopenErrno(op, t.Sandbox(), err) }

// reopenErrno classifies an error from opening a checked path again beneath a root: a
// symlink or a vanished component on the way means the path changed since the check.
func reopenErrno(op, name string, err error) error {
	switch err {
	case unix.ELOOP, unix.EXDEV, unix.ENOENT, unix.ENOTDIR:
		return newErr(op, name, ErrChanged, err)
	}
	return fromErrno(op, name, err)
}

// maxAttempts is how often open resolves a path again when it changed under the check.
const maxAttempts = 4

// open resolves unsafePath (as Resolve) and opens it for reading (as Target.Open),
// resolving again when the path changed between check and open, up to a few times.
func (m *Map) open(unsafeCwd, unsafePath string) (*os.File, Target, error) {
	for attempt := 1; ; attempt++ {
		t, err := m.Resolve(unsafeCwd, unsafePath)
		if err != nil {
			return nil, Target{}, err
		}
		f, err := t.Open()
		if err == nil || attempt == maxAttempts || !errors.Is(err, ErrChanged) {
			return f, t, err
		}
	}
}

// relJoin joins two slash-separated relative paths ("" is the root).
func relJoin(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "/" + b
}

// parentOf splits a non-empty relative path into its parent and last component.
func parentOf(rel string) (string, string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return "", rel
	}
	return rel[:i], rel[i+1:]
}
