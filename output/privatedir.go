package output

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/containerd/errdefs"
)

// ErrNotPrivate is the class of a directory kennel will not put output files in: not a
// directory (a symlink counts as not one), readable or writable by group or others, or
// owned by another user.
var ErrNotPrivate = errdefs.ErrPermissionDenied.WithMessage("directory is not private")

// PrepareDir creates dir with mode 0700 when it is missing (parents too) and checks that
// it is private: a real directory (not a symlink), owned by the effective user, with no
// group or other permission bits. It changes nothing about an existing directory; one
// that is not private is refused with an ErrNotPrivate error.
func PrepareDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("prepare output dir %s: %w", dir, err)
	}
	return checkPrivateDir(dir)
}

// checkPrivateDir returns an ErrNotPrivate error unless dir is a private directory.
func checkPrivateDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("check output dir %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("check output dir %s: %s: %w", dir, describeType(fi.Mode()), ErrNotPrivate)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("check output dir %s: mode %04o (want 0700): %w", dir, perm, ErrNotPrivate)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("check output dir %s: owned by uid %d, not %d: %w", dir, st.Uid, os.Geteuid(), ErrNotPrivate)
	}
	return nil
}

func describeType(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	case m.IsRegular():
		return "a file"
	}
	return "not a directory"
}
