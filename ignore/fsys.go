package ignore

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// openDirAt opens the directory name inside the directory dirfd without
// following a symlink, so the walk can never leave the tree even if the
// tree changes under it. path names the result (os uses it for the lstat
// fallback of DirEntry.Info and Type on file systems without d_type).
func openDirAt(dirfd int, name, path string) (*os.File, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// readIgnoreAt reads and parses the .gitignore in the directory dirfd
// (named dir, for errors). A missing .gitignore, one that is not a regular
// file (git does not follow an in-tree symlinked .gitignore; a FIFO is not
// opened for blocking) or one over maxIgnoreFile has no patterns; other
// errors are returned.
func readIgnoreAt(dirfd int, dir string) ([]pattern, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Openat(dirfd, ".gitignore", unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) ||
			errors.Is(err, unix.ENXIO) {
			return nil, nil
		}
		return nil, fmt.Errorf("read gitignore %s: %w", dir, err)
	}
	f := os.NewFile(uintptr(fd), dir+"/.gitignore")
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read gitignore %s: %w", dir, err)
	}
	if !st.Mode().IsRegular() || st.Size() > maxIgnoreFile {
		return nil, nil
	}
	data, err := io.ReadAll(io.LimitReader(f, maxIgnoreFile+1))
	if err != nil {
		return nil, fmt.Errorf("read gitignore %s: %w", dir, err)
	}
	if len(data) > maxIgnoreFile {
		return nil, nil
	}
	return parseIgnoreFile(data), nil
}
