package images

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultPythonCacheDir is where PythonCache keeps its entries unless told otherwise:
// $XDG_CACHE_HOME/kennel/python when XDG_CACHE_HOME is an absolute path, else
// ~/.cache/kennel/python (beside DefaultCacheDir's bundles). It does not create it.
func DefaultPythonCacheDir() (string, error) {
	bundles, err := DefaultCacheDir()
	if err != nil {
		return "", fmt.Errorf("python cache dir: %w", err)
	}
	return filepath.Join(filepath.Dir(bundles), "python"), nil
}

// PythonCache remembers ResolvePython's answers on disk, so a process that starts a
// kernel (every `kennel run`) need not run the interpreter, or the shim in front of it,
// to find it. An entry is used only while everything the answer was found from is
// unchanged:
//
//   - the file the name leads to (exec.LookPath, symlinks followed): its path, device,
//     inode, size, mode, mtime and ctime, so a changed, replaced or re-linked
//     interpreter or shim is asked again;
//   - for a name without a slash, PATH;
//   - what shims choose an interpreter by: HOME, every PYENV_*, ASDF_*, MISE_* and
//     CONDA_* variable and VIRTUAL_ENV, and the identity (or absence) of each
//     .python-version and .tool-versions file from the working directory (PYENV_DIR if
//     set) up to /, and of $PYENV_ROOT/version (default ~/.pyenv/version);
//   - the interpreter found (sys.executable): its device, inode, size, mode, mtime and
//     ctime.
//
// A shim that picks its interpreter by anything else (a file not listed here, the time
// of day) is not asked again when that changes; name the interpreter by its path then.
//
// Entries are files of at most 8 KiB in a directory kept private: it is created with
// mode 0700 and is used only while it is a real directory (not a symlink) owned by the
// effective user with no permission for group or others; an entry is read through that
// directory's descriptor without following a symlink, and used only when it is a regular
// file owned by the effective user with mode 0600 (no bits for group or others). Anything
// else is ignored: the interpreter is asked, as if there were no cache. A cache that
// cannot be read or written never fails a resolution; failures are not cached.
//
// The zero value uses DefaultPythonCacheDir. A PythonCache is safe for concurrent use,
// also by several processes (an entry is written to a temporary file and renamed into
// place).
type PythonCache struct {
	// Dir holds the entries. Empty means DefaultPythonCacheDir(); its missing parents
	// are created with mode 0700.
	Dir string
}

// PythonResult is what PythonCache.Resolve found.
type PythonResult struct {
	// Path is the interpreter's absolute path, as ResolvePython returns it.
	Path string
	// Cached is true when Path came from an entry and no interpreter was run.
	Cached bool
}

// maxPythonEntry bounds an entry file.
const maxPythonEntry = 8 << 10

// pythonEntry is the on-disk form of one resolution.
type pythonEntry struct {
	Version int    `json:"v"`
	Key     string `json:"key"`
	Exe     string `json:"exe"`
	ExeID   string `json:"exeId"`
}

// Resolve returns what ResolvePython(ctx, name) would: from an entry when one matches
// (see PythonCache), else by running the interpreter, and then it writes the entry. Its
// errors are ResolvePython's.
func (c PythonCache) Resolve(ctx context.Context, name string) (PythonResult, error) {
	name = cmp.Or(name, "python3")
	found, err := exec.LookPath(name)
	if err != nil {
		return PythonResult{}, &PythonError{Name: name, Reason: "not found", Err: err}
	}
	key, keyErr := pythonKey(name, found)
	dir := c.Dir
	if dir == "" && keyErr == nil {
		dir, keyErr = DefaultPythonCacheDir()
	}
	entryName := ""
	if keyErr == nil {
		sum := sha256.Sum256([]byte(key))
		entryName = hex.EncodeToString(sum[:16])
		if exe, ok := readPythonEntry(dir, entryName, key); ok {
			return PythonResult{Path: exe, Cached: true}, nil
		}
	}
	exe, err := ResolvePython(ctx, found)
	if err != nil {
		if pe := (*PythonError)(nil); errors.As(err, &pe) {
			pe.Name = name
		}
		return PythonResult{}, err
	}
	if keyErr == nil {
		if id, err := fileID(exe); err == nil {
			writePythonEntry(dir, entryName, pythonEntry{Version: 1, Key: key, Exe: exe, ExeID: id})
		}
	}
	return PythonResult{Path: exe}, nil
}

// pythonKey is the text every entry's validity rests on (see PythonCache).
func pythonKey(name, found string) (string, error) {
	abs, err := filepath.Abs(found)
	if err != nil {
		return "", err
	}
	id, err := fileID(abs)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "name %q\nfound %q %s\n", name, abs, id)
	if !strings.Contains(name, "/") {
		fmt.Fprintf(&b, "PATH %q\n", os.Getenv("PATH"))
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return k != "HOME" && k != "VIRTUAL_ENV" && !strings.HasPrefix(k, "PYENV") &&
			!strings.HasPrefix(k, "ASDF_") && !strings.HasPrefix(k, "MISE_") && !strings.HasPrefix(k, "CONDA_")
	})
	slices.Sort(env)
	for _, kv := range env {
		fmt.Fprintf(&b, "env %q\n", kv)
	}
	start := os.Getenv("PYENV_DIR")
	if start == "" {
		if start, err = os.Getwd(); err != nil {
			return "", err
		}
	}
	versionFiles := []string{}
	for d := filepath.Clean(start); ; d = filepath.Dir(d) {
		versionFiles = append(versionFiles, filepath.Join(d, ".python-version"), filepath.Join(d, ".tool-versions"))
		if d == filepath.Dir(d) {
			break
		}
	}
	if root := os.Getenv("PYENV_ROOT"); root != "" {
		versionFiles = append(versionFiles, filepath.Join(root, "version"))
	} else if home, err := os.UserHomeDir(); err == nil {
		versionFiles = append(versionFiles, filepath.Join(home, ".pyenv", "version"))
	}
	for _, f := range versionFiles {
		if id, err := fileID(f); err == nil {
			fmt.Fprintf(&b, "file %q %s\n", f, id)
		} else if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTDIR) {
			return "", err // unreadable: the shim may see what we cannot
		}
	}
	return b.String(), nil
}

// fileID names the identity of the file at p (symlinks followed): device, inode, size,
// mode, mtime and ctime, in nanoseconds.
func fileID(p string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return "", &os.PathError{Op: "stat", Path: p, Err: err}
	}
	return fmt.Sprintf("dev=%d ino=%d size=%d mode=%o mtime=%d ctime=%d", st.Dev, st.Ino, st.Size, st.Mode,
		st.Mtim.Nano(), st.Ctim.Nano()), nil
}

// openPrivateDir opens dir when it is a directory (not a symlink) owned by the effective
// user with no permission bits for group or others; -1 otherwise.
func openPrivateDir(dir string) int {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0 {
		unix.Close(fd)
		return -1
	}
	return fd
}

// readPythonEntry returns the interpreter of the entry name in dir when the entry is
// trustworthy (see PythonCache), is for key, and names an interpreter whose identity is
// the one recorded.
func readPythonEntry(dir, name, key string) (string, bool) {
	dfd := openPrivateDir(dir)
	if dfd < 0 {
		return "", false
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false
	}
	f := os.NewFile(uintptr(fd), filepath.Join(dir, name))
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() ||
		st.Mode&0o077 != 0 || st.Size > maxPythonEntry {
		return "", false
	}
	data := make([]byte, maxPythonEntry+1)
	n, _ := f.ReadAt(data, 0)
	var e pythonEntry
	if n > maxPythonEntry || json.Unmarshal(data[:n], &e) != nil || e.Version != 1 || e.Key != key || !filepath.IsAbs(e.Exe) {
		return "", false
	}
	if id, err := fileID(e.Exe); err != nil || id != e.ExeID {
		return "", false
	}
	return e.Exe, true
}

// writePythonEntry puts e in dir as name, through a temporary file renamed into place.
// It gives up quietly: the cache only saves time.
func writePythonEntry(dir, name string, e pythonEntry) {
	data, err := json.Marshal(e)
	if err != nil || len(data) > maxPythonEntry {
		return
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return
	}
	dfd := openPrivateDir(dir)
	if dfd < 0 {
		return
	}
	defer unix.Close(dfd)
	tmp := "." + name + ".tmp-" + rand.Text()
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, werr := f.Write(data)
	if cerr := f.Close(); werr != nil || cerr != nil || unix.Renameat(dfd, tmp, dfd, name) != nil {
		unix.Unlinkat(dfd, tmp, 0)
	}
}
