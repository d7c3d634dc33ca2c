package ignore

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
)

// fsDir is the directory path in fsys, for WalkFS.
type fsDir struct {
	fsys fs.FS
	path string
}

func (d fsDir) name() string                    { return d.path }
func (d fsDir) readDir() ([]fs.DirEntry, error) { return fs.ReadDir(d.fsys, d.path) }
func (d fsDir) close()                          {}

func (d fsDir) sub(e fs.DirEntry) (dir, error) {
	return fsDir{fsys: d.fsys, path: path.Join(d.path, e.Name())}, nil
}

// gitignore opens .gitignore only if it was listed as a regular file: a
// symlink is not followed (as git) and a FIFO is not opened (fs.FS has no
// non-blocking open).
func (d fsDir) gitignore(e fs.DirEntry) ([]pattern, error) {
	if !e.Type().IsRegular() {
		return nil, nil
	}
	f, err := d.fsys.Open(path.Join(d.path, ".gitignore"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil // removed since it was listed
		}
		return nil, fmt.Errorf("read gitignore %s: %w", d.path, err)
	}
	defer f.Close()
	return readPatterns(f, d.path)
}
