package images

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// DefaultCacheDir is where bundles are unpacked unless the caller says otherwise:
// $XDG_CACHE_HOME/kennel/bundles when XDG_CACHE_HOME is an absolute path, else
// ~/.cache/kennel/bundles. It does not create the directory.
func DefaultCacheDir() (string, error) {
	if dir := os.Getenv("XDG_CACHE_HOME"); dir != "" && filepath.IsAbs(dir) {
		return filepath.Join(dir, "kennel", "bundles"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("bundle cache dir: %w", err)
	}
	return filepath.Join(home, ".cache", "kennel", "bundles"), nil
}

// Unpack writes the bundle into cacheDir/<hash>/ once and returns that directory.
//
// Missing directories are created with mode 0700 and files with mode 0600, modes set at
// creation, so no other user can open them in between. The tree is written into a
// temporary directory beside the target and renamed into place, so a reader sees all of
// it or none; a concurrent Unpack of the same bundle (in this or another process)
// succeeds too, and an existing directory of that name is reused as it is. cacheDir
// must not be a symlink, must be owned by the caller and must not be writable by group
// or others (else ErrUnsafeCache). A crash can leave a temporary ".<hash>.tmp-*"
// directory behind; it is never used and may be removed.
func (b *Bundle) Unpack(cacheDir string) (dir string, err error) {
	if cacheDir == "" {
		return "", fmt.Errorf("unpack bundle: empty cache dir: %w", ErrUnsafeCache)
	}
	cacheDir, err = filepath.Abs(cacheDir)
	if err != nil {
		return "", fmt.Errorf("unpack bundle: %w", err)
	}
	if err := os.MkdirAll(cacheDir, 0o700); err != nil {
		return "", fmt.Errorf("unpack bundle %s: %w", cacheDir, err)
	}
	if err := checkPrivateDir(cacheDir); err != nil {
		return "", fmt.Errorf("unpack bundle: %w", err)
	}
	final := filepath.Join(cacheDir, b.hash)
	if ok, err := reusable(final); err != nil || ok {
		if err != nil {
			return "", fmt.Errorf("unpack bundle: %w", err)
		}
		return final, nil
	}
	tmp, err := os.MkdirTemp(cacheDir, "."+b.hash+".tmp-")
	if err != nil {
		return "", fmt.Errorf("unpack bundle: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err := b.writeTree(tmp); err != nil {
		return "", fmt.Errorf("unpack bundle %s: %w", b.hash, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		// A racing unpacker may have put the same content in place first.
		if ok, rerr := reusable(final); rerr == nil && ok {
			os.RemoveAll(tmp)
			return final, nil
		}
		return "", fmt.Errorf("unpack bundle %s: %w", b.hash, err)
	}
	return final, nil
}

// writeTree writes every file under root (an existing private directory).
func (b *Bundle) writeTree(root string) error {
	made := map[string]bool{}
	for _, f := range b.files {
		target := filepath.Join(root, filepath.FromSlash(f.Path))
		if err := mkdirs(root, filepath.Dir(target), made); err != nil {
			return err
		}
		fh, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = fh.Write(f.Data)
		if err == nil {
			err = fh.Sync()
		}
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	dirs := append(slices.Collect(maps.Keys(made)), root)
	for _, d := range dirs {
		if err := syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

func mkdirs(root, dir string, made map[string]bool) error {
	if dir == root || made[dir] {
		return nil
	}
	if err := mkdirs(root, filepath.Dir(dir), made); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	made[dir] = true
	return nil
}

func syncDir(dir string) error {
	fh, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer fh.Close()
	return fh.Sync()
}

// reusable reports whether dir exists as a directory of ours to reuse; an entry of
// that name that is anything else is an error.
func reusable(dir string) (bool, error) {
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if err := checkPrivateDir(dir); err != nil {
		return false, err
	}
	return true, nil
}

// checkPrivateDir refuses a path that is a symlink, not a directory, owned by another
// user, or writable by group or others.
func checkPrivateDir(dir string) error {
	info, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	switch {
	case info.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("%s is a symlink: %w", dir, ErrUnsafeCache)
	case !info.IsDir():
		return fmt.Errorf("%s is not a directory: %w", dir, ErrUnsafeCache)
	case info.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s has mode %04o, writable by others (run `chmod go-w %s`): %w", dir, info.Mode().Perm(), dir, ErrUnsafeCache)
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s is owned by uid %d, not %d: %w", dir, st.Uid, os.Geteuid(), ErrUnsafeCache)
	}
	return nil
}
