package images

import (
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// kernelFS holds the stub's source tree. "all:" keeps files whose names begin with "_"
// (__init__.py); Stub filters out caches and hidden files.
//
//go:embed all:kernel
var kernelFS embed.FS

// File is one file of a Bundle.
type File struct {
	// Path is slash-separated and relative to the bundle root ("kennel/__init__.py").
	Path string
	// Data is the file's content.
	Data []byte
}

// Bundle is a set of files that together make the kernel stub, with a content hash.
// A Bundle is immutable and safe for concurrent use.
type Bundle struct {
	files []File // sorted by Path, no duplicates
	hash  string
}

// Stub returns the kernel stub embedded in this binary: every file under
// images/kernel except __pycache__ directories, compiled Python files and names
// beginning with ".". The error is non-nil only if the embedded tree is unreadable.
func Stub() (*Bundle, error) {
	var files []File
	err := fs.WalkDir(kernelFS, "kernel", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if p != "kernel" && (strings.HasPrefix(name, ".") || name == "__pycache__") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() || strings.HasSuffix(name, ".pyc") {
			return nil
		}
		data, err := kernelFS.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, File{Path: strings.TrimPrefix(p, "kernel/"), Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read embedded stub: %w", err)
	}
	if buildSalt != "" {
		files = append(files, File{Path: SaltFile, Data: []byte(buildSalt)})
	}
	return NewBundle(files)
}

// buildSalt, set at link time (-ldflags "-X github.com/kennel-dev/kennel/images.buildSalt=S"),
// puts a file SaltFile holding S into the Stub bundle, so a build of the same stub gets
// another bundle hash: how a test makes "another build" whose daemon finds the kernels
// of the first one stale. Empty in every release build.
var buildSalt string

// SaltFile is the path of the salt file a salted build adds to its bundle.
const SaltFile = "build-salt"

// Salted is b with a file SaltFile holding salt: the same stub under another hash (see
// buildSalt).
func Salted(b *Bundle, salt string) (*Bundle, error) {
	files := make([]File, 0, len(b.files)+1)
	for _, f := range b.files {
		if f.Path != SaltFile {
			files = append(files, f)
		}
	}
	return NewBundle(append(files, File{Path: SaltFile, Data: []byte(salt)}))
}

// NewBundle makes a Bundle of files. Paths must be clean, relative, slash-separated
// and unique, and no path may be a directory of another; the error says which one is
// not. files is copied.
func NewBundle(files []File) (*Bundle, error) {
	out := make([]File, len(files))
	for i, f := range files {
		if !validPath(f.Path) {
			return nil, fmt.Errorf("bundle path %q: %w", f.Path, ErrBadPath)
		}
		out[i] = File{Path: f.Path, Data: append([]byte(nil), f.Data...)}
	}
	slices.SortFunc(out, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	seen := make(map[string]bool, len(out))
	for _, f := range out {
		seen[f.Path] = true
	}
	for i, f := range out {
		if i > 0 && out[i-1].Path == f.Path {
			return nil, fmt.Errorf("bundle path %q twice: %w", f.Path, ErrBadPath)
		}
		for dir := path.Dir(f.Path); dir != "."; dir = path.Dir(dir) {
			if seen[dir] {
				return nil, fmt.Errorf("bundle path %q is under file %q: %w", f.Path, dir, ErrBadPath)
			}
		}
	}
	return &Bundle{files: out, hash: hashFiles(out)}, nil
}

// validPath reports whether p is a clean relative slash path (fs.ValidPath: no "", "."
// or ".." element) other than ".", with no backslash or NUL byte.
func validPath(p string) bool {
	return fs.ValidPath(p) && p != "." && !strings.ContainsAny(p, "\\\x00")
}

// hashFiles is sha256 over, for each file in path order, the 8-byte big-endian length
// of the path, the path, the 8-byte big-endian length of the content, the content.
// The bootstrap program (bootstrap.py) computes the same.
func hashFiles(files []File) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range files {
		binary.BigEndian.PutUint64(n[:], uint64(len(f.Path)))
		h.Write(n[:])
		h.Write([]byte(f.Path))
		binary.BigEndian.PutUint64(n[:], uint64(len(f.Data)))
		h.Write(n[:])
		h.Write(f.Data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Hash is the lowercase sha256 hex of the bundle's (path, content) pairs in path order.
// It depends on nothing but the files: the same files give the same hash in every
// build. The kernel reports it in its hello frame.
func (b *Bundle) Hash() string { return b.hash }

// Files returns a copy of the bundle's files in path order.
func (b *Bundle) Files() []File {
	out := make([]File, len(b.files))
	for i, f := range b.files {
		out[i] = File{Path: f.Path, Data: append([]byte(nil), f.Data...)}
	}
	return out
}
