package fsroot

import (
	"context"
	"io"
	"io/fs"
	"strings"
)

// Root is a tree of files served to a sandbox, named by sandbox paths and scoped to the
// directories it serves, as an os.Root is scoped to one directory: no method reaches
// anything outside them, whatever the path or the symlinks on the way.
//
// Every path argument is hostile (unsafePath). A relative one is relative to cwd, a
// sandbox path ("" means the session's working directory); cwd must resolve to an
// existing directory inside the served tree. ".." goes up from where the resolution
// is (after a symlink, from the symlink's target), as in the kernel; "~" paths are
// refused with ErrOutside; a trailing slash needs a directory. Refusals are decided by
// the implementation and come back as *Error of the classes of this package: ErrOutside
// (nothing outside was opened, read or written), ErrReadOnly, ErrNotFound, ErrInvalid,
// ErrLoop, ErrExists, ErrChanged, ErrDenied, ErrNoSpace, ErrCrossDevice, ErrInternal.
//
// A Root is safe for concurrent use. ctx bounds calls that may block (a remote round
// trip, a walk).
type Root interface {
	// Stat resolves unsafePath, following every symlink, and describes what is there.
	// A path that resolves inside but does not exist is no error: Info.Exists is false
	// and Info.Path is where it would be (a write creates it there).
	Stat(ctx context.Context, cwd, unsafePath string) (Info, error)
	// Lstat is Stat for an operation on a directory entry itself (a rename's source or
	// destination): the last component is not followed. A path whose last component
	// is "." or "..", or that names a served root, is refused with ErrInvalid.
	Lstat(ctx context.Context, cwd, unsafePath string) (Info, error)
	// Open opens the regular file unsafePath (symlinks followed) for reading: a stream,
	// and its Info with its Size when opened. A directory or another non-regular file is
	// refused with ErrInvalid, a missing one with ErrNotFound. Open on a read-only
	// directory succeeds (Info.ReadOnly says so).
	Open(ctx context.Context, cwd, unsafePath string) (io.ReadCloser, Info, error)
	// WriteFile replaces the file unsafePath (symlinks followed) with data, atomically:
	// a temporary file beside it, then a rename over it, so a reader sees the old content
	// or the new. Missing parent directories are created. A replaced file keeps its mode
	// and (where the host allows) its owner. It returns the Info from before the write:
	// Exists false means the file was created. ErrReadOnly below a read-only directory,
	// ErrInvalid on a directory; on every error the file keeps its old content and no
	// temporary file or new directory is left.
	WriteFile(ctx context.Context, cwd, unsafePath string, data []byte) (Info, error)
	// Rename moves the entry oldPath (a symlink moves as itself) to newPath, which must
	// not exist (ErrExists); newPath's missing parent directories are created. Both must
	// be writable (ErrReadOnly) and oldPath must exist (ErrNotFound) and not be a served
	// root (ErrInvalid). Nothing changes on a refusal.
	Rename(ctx context.Context, cwd, oldPath, newPath string) error
	// WalkDir lists the tree at unsafePath (symlinks followed to it) as the sandbox's
	// tools see it: each directory's names in byte order, a directory before what it
	// holds, symlinks reported as themselves and never entered, .git never reported or
	// entered nor anything the tree's .gitignore files ignore (git's rules, package ignore; only the .gitignore files at or below the walked directory count). A
	// file yields itself as the one entry (Rel is its name). fs.SkipDir from fn skips a
	// directory (or, on a file, the rest of its directory); fs.SkipAll ends the walk
	// with nil; any other error ends it and is returned. ErrNotFound when nothing is at
	// unsafePath.
	WalkDir(ctx context.Context, cwd, unsafePath string, fn func(Entry) error) error
	// ReadFile reads the regular file e (an entry WalkDir reported) into buf's storage,
	// grown as needed: at most max bytes, more reporting that the file holds more. It
	// opens e.Path again without following any symlink (one swapped in since the walk
	// is refused), so it never reads outside the served tree.
	ReadFile(ctx context.Context, e Entry, buf []byte, max int) (data []byte, more bool, err error)
}

// Info describes a sandbox path as a Root resolved it.
type Info struct {
	// Path is the sandbox path: absolute, cleaned, symlinks on the way resolved (the last
	// one too, except for Lstat). Replies carry this path.
	Path string
	// Exists reports that something is at Path; when false, Path is where a write
	// would create it (its missing tail is plain names below an existing directory).
	Exists bool
	// Type is the type bits of what is at Path (fs.ModeDir, fs.ModeSymlink for Lstat,
	// 0 for a regular file), when Exists.
	Type fs.FileMode
	// Size is a regular file's size in bytes (when resolved, or for Open when opened).
	Size int64
	// ReadOnly reports that Path lies below a read-only directory: every change there
	// is refused with ErrReadOnly.
	ReadOnly bool
}

// IsDir reports whether a directory is at the path.
func (i Info) IsDir() bool { return i.Exists && i.Type.IsDir() }

// IsRegular reports whether a regular file is at the path.
func (i Info) IsRegular() bool { return i.Exists && i.Type.IsRegular() }

// Entry is one entry WalkDir found.
type Entry struct {
	// Path is the entry's sandbox path.
	Path string
	// Rel is its path relative to the directory walked, slash-separated.
	Rel string
	// Type is its type bits, as fs.DirEntry.Type reports them (a symlink is
	// fs.ModeSymlink: it was not followed).
	Type fs.FileMode
}

// MaxPath is the longest path (in bytes) a Root accepts, as the host's PATH_MAX.
const MaxPath = 4096

// MaxSymlinks is the most symlinks one resolution follows, as Linux's own limit; one
// more is ErrLoop.
const MaxSymlinks = 40

// CheckPath refuses what can never be a usable sandbox path, as every Root does before
// it looks at anything: empty, a NUL byte or longer than MaxPath (ErrInvalid), or
// relative to the sandbox home ("~", "~/x", "~user/x": ErrOutside). op names the
// operation in the error.
func CheckPath(op, unsafePath string) error {
	switch {
	case unsafePath == "":
		return NewError(op, "", ErrInvalid, detail("empty path"))
	case strings.IndexByte(unsafePath, 0) >= 0:
		return NewError(op, unsafePath, ErrInvalid, detail("NUL byte in path"))
	case len(unsafePath) > MaxPath:
		return NewError(op, unsafePath, ErrInvalid, detail("path too long"))
	case unsafePath[0] == '~':
		return NewError(op, unsafePath, ErrOutside, detail("paths relative to the sandbox home are not mapped"))
	}
	return nil
}

// detail is a cause that is only a message.
type detail string

func (d detail) Error() string { return string(d) }
