package ignore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// localDir is a local directory held by its descriptor, for Walk: every
// subdirectory and .gitignore is opened relative to it with O_NOFOLLOW.
type localDir struct{ f *os.File }

func (d localDir) name() string                    { return d.f.Name() }
func (d localDir) readDir() ([]fs.DirEntry, error) { return d.f.ReadDir(-1) }
func (d localDir) close()                          { d.f.Close() }

// gitignore opens .gitignore by name whatever readDir said of it: the open
// itself refuses a symlink and does not block on a FIFO.
func (d localDir) gitignore(fs.DirEntry) ([]pattern, error) {
	return readIgnoreAt(int(d.f.Fd()), d.f.Name())
}

func (d localDir) sub(e fs.DirEntry) (dir, error) {
	f, err := openDirAt(int(d.f.Fd()), e.Name(), filepath.Join(d.f.Name(), e.Name()))
	if err != nil {
		return nil, err
	}
	return localDir{f}, nil
}

// openDirAt opens the directory name inside the directory dirfd without
// following a symlink, so the walk can never leave the tree even if the
// tree changes under it. path names the result (os uses it for the lstat
// fallback of DirEntry.Info and Type on file systems without d_type).
func openDirAt(dirfd int, name, path string) (*os.File, error) {
	fd, err := openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// openat is openat(2), again after EINTR.
func openat(dirfd int, name string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// readIgnoreAt reads and parses the .gitignore in the directory dirfd
// (named dir, for errors). A missing .gitignore, one that is not a regular
// file (git does not follow an in-tree symlinked .gitignore; a FIFO is not
// opened for blocking) or one larger than MaxFileSize has no patterns;
// other errors are returned.
func readIgnoreAt(dirfd int, dir string) ([]pattern, error) {
	fd, err := openat(dirfd, ".gitignore", unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) ||
			errors.Is(err, unix.ENXIO) {
			return nil, nil
		}
		return nil, fmt.Errorf("read gitignore %s: %w", dir, err)
	}
	f := os.NewFile(uintptr(fd), dir+"/.gitignore")
	defer f.Close()
	return readPatterns(f, dir)
}

// readPatterns reads and parses the open .gitignore f of the directory dir
// (for errors), as Walk and WalkFS both do: one that is not a regular file
// or is larger than MaxFileSize (by its Stat, or by what it holds when
// read, should it have grown) has no patterns, and at most MaxFileSize+1
// bytes are read.
func readPatterns(f fs.File, dir string) ([]pattern, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read gitignore %s: %w", dir, err)
	}
	if !st.Mode().IsRegular() || st.Size() > MaxFileSize {
		return nil, nil
	}
	var b bytes.Buffer
	b.Grow(int(st.Size()) + bytes.MinRead) // one allocation, unless the file grew
	if _, err := b.ReadFrom(io.LimitReader(f, MaxFileSize+1)); err != nil {
		return nil, fmt.Errorf("read gitignore %s: %w", dir, err)
	}
	if b.Len() > MaxFileSize {
		return nil, nil
	}
	return parseIgnoreFile(b.Bytes()), nil
}
