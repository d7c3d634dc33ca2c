package pathmap

import (
	"context"
	"io"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kennel-dev/kennel/fshost/fsroot"
)

// Map is an fsroot.Root: the fs.* handlers (fshost) serve the sandbox's files through it.
var _ fsroot.Root = (*Map)(nil)

// info describes the target as fsroot does.
func (t Target) info() fsroot.Info {
	i := fsroot.Info{Path: t.Sandbox(), Exists: t.Exists(), ReadOnly: t.ReadOnly()}
	if i.Exists {
		i.Type = modeType(t.typ)
		if t.typ != 0 && i.Type.IsRegular() {
			i.Size = t.size
		}
	}
	return i
}

// Stat resolves unsafePath as Resolve does (every symlink followed, nothing outside the
// mounts looked at) and describes the place it leads to (fsroot.Root).
func (m *Map) Stat(ctx context.Context, unsafeCwd, unsafePath string) (fsroot.Info, error) {
	t, err := m.Resolve(unsafeCwd, unsafePath)
	if err != nil {
		return fsroot.Info{}, err
	}
	return t.info(), nil
}

// Lstat resolves unsafePath as ResolveEntry does (the last component not followed) and
// describes the entry (fsroot.Root).
func (m *Map) Lstat(ctx context.Context, unsafeCwd, unsafePath string) (fsroot.Info, error) {
	t, err := m.ResolveEntry(unsafeCwd, unsafePath)
	if err != nil {
		return fsroot.Info{}, err
	}
	return t.info(), nil
}

// Open resolves unsafePath and opens the regular file there for reading beneath its
// mount's root (Target.Open: the file opened is the one checked), resolving again a few
// times when the path changed between the check and the open (fsroot.Root).
func (m *Map) Open(ctx context.Context, unsafeCwd, unsafePath string) (io.ReadCloser, fsroot.Info, error) {
	f, t, err := m.open(unsafeCwd, unsafePath)
	if err != nil {
		return nil, fsroot.Info{}, err
	}
	return f, t.info(), nil
}

// WriteFile resolves unsafePath and replaces the file there (Target.WriteFile:
// atomically, parents made, mode and owner kept, new files given to Config.Owner). It
// returns the Info from before the write (fsroot.Root).
func (m *Map) WriteFile(ctx context.Context, unsafeCwd, unsafePath string, data []byte) (fsroot.Info, error) {
	t, err := m.Resolve(unsafeCwd, unsafePath)
	if err != nil {
		return fsroot.Info{}, err
	}
	if _, err := t.WriteFile(data); err != nil {
		return fsroot.Info{}, err
	}
	return t.info(), nil
}

// Rename resolves both entries (ResolveEntry) and moves one to the other (the package's
// Rename: no replace, parents made, across file systems for regular files) (fsroot.Root).
func (m *Map) Rename(ctx context.Context, unsafeCwd, oldPath, newPath string) error {
	from, err := m.ResolveEntry(unsafeCwd, oldPath)
	if err != nil {
		return err
	}
	to, err := m.ResolveEntry(unsafeCwd, newPath)
	if err != nil {
		return err
	}
	return Rename(from, to)
}

// WalkDir resolves unsafePath and walks the tree there as the sandbox sees it (deeper
// mounts shown in their places), listed by Config.Walk (by default ignore.Walk: .git and
// ignored files skipped, symlinks never followed), each tree from a descriptor of the
// directory checked (fsroot.Root).
func (m *Map) WalkDir(ctx context.Context, unsafeCwd, unsafePath string, fn func(fsroot.Entry) error) error {
	t, err := m.Resolve(unsafeCwd, unsafePath)
	if err != nil {
		return err
	}
	return m.walkTarget(ctx, t, m.list, fn)
}

// ReadFile reads the regular file a walk listed: e.Path is mapped to its mount by name
// and opened beneath the mount's root with no symlink anywhere on the way (one swapped in
// since the walk is ErrChanged), non-blocking so that a FIFO or device found there is
// refused unread; then read with plain read(2) calls up to the size fstat reports, at
// most max bytes (fsroot.Root).
func (m *Map) ReadFile(ctx context.Context, e fsroot.Entry, buf []byte, max int) (data []byte, more bool, err error) {
	const op = "open"
	if err := checkSyntax(op, e.Path); err != nil {
		return buf[:0], false, err
	}
	p := filepath.Clean(e.Path)
	mm, rest := m.sandboxMount(comps(p))
	if mm == nil || !filepath.IsAbs(p) {
		return buf[:0], false, newErr(op, e.Path, ErrOutside, nil)
	}
	fd, st, err := openBeneath(mm.root, strings.Join(rest, "/"), p)
	if err != nil {
		return buf[:0], false, err
	}
	defer closeFd(fd)
	if fileType(&st) != unix.S_IFREG {
		return buf[:0], false, newErr(op, p, ErrInvalid, detail("not a regular file")) // closed unread
	}
	return readAll(fd, p, st.Size, buf, max)
}
