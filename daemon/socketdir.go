package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// SocketName is the socket file's name in its default directory.
const SocketName = "kennel.sock"

// ErrSocketDir is the class of a socket directory the daemon refuses; the error is a
// *SocketDirError.
var ErrSocketDir = errors.New("socket directory is not private")

// Fault says why a directory is not private.
type Fault string

// The faults of a directory.
const (
	FaultSymlink Fault = "is a symlink"
	FaultNotDir  Fault = "is not a directory"
	FaultOwner   Fault = "is owned by another user"
	FaultMode    Fault = "is writable by group or others"
	FaultMissing Fault = "cannot be created"
)

// SocketDirError is a refused socket (or state) directory: it names the directory, the
// fault and the fix. It matches ErrSocketDir with errors.Is.
type SocketDirError struct {
	// Dir is the directory refused.
	Dir string
	// Fault is what is wrong with it.
	Fault Fault
	// UID is the owner found (FaultOwner) and Mode the permission bits found (FaultMode).
	UID  int
	Mode fs.FileMode
	// Err is the underlying error of FaultMissing, else nil.
	Err error
	// What names the directory's role: "" reads "socket directory".
	What string
}

// Error names the directory, the fault and the fix.
func (e *SocketDirError) Error() string {
	what := string(e.Fault)
	var fix string
	switch e.Fault {
	case FaultSymlink, FaultNotDir:
		fix = "remove the path, or give --socket a path in a private directory"
	case FaultOwner:
		what = fmt.Sprintf("is owned by uid %d, not uid %d", e.UID, os.Geteuid())
		fix = "give --socket a path in a private directory of your own"
	case FaultMode:
		what = fmt.Sprintf("has mode %#o: writable by group or others", e.Mode.Perm())
		fix = "run chmod go-w " + strconv.Quote(e.Dir) + ", or give --socket a path in a private directory"
	default:
		what = fmt.Sprintf("cannot be created: %v", e.Err)
		fix = "give --socket a path in a private directory"
	}
	role := e.What
	if role == "" {
		role = "socket directory"
	} else {
		fix = strings.Replace(fix, "--socket", "--state", 1)
	}
	return fmt.Sprintf("%s %s %s: %s", role, e.Dir, what, fix)
}

// Unwrap returns ErrSocketDir and the underlying error.
func (e *SocketDirError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrSocketDir, e.Err}
	}
	return []error{ErrSocketDir}
}

// DefaultSocket returns the default socket path: kennel.sock in $XDG_RUNTIME_DIR/kennel,
// else in $TMPDIR/kennel-<uid> (/tmp when TMPDIR is unset). getenv is os.Getenv in
// production.
func DefaultSocket(getenv func(string) string) string {
	if d := getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "kennel", SocketName)
	}
	tmp := getenv("TMPDIR")
	if tmp == "" || !filepath.IsAbs(tmp) {
		tmp = "/tmp"
	}
	return filepath.Join(tmp, "kennel-"+strconv.Itoa(os.Geteuid()), SocketName)
}

// CheckSocketDir returns nil when dir is a private directory: a real directory (not a
// symlink), owned by the effective uid, with no group or other write bit. Otherwise it
// returns a *SocketDirError; a missing directory is an error wrapping fs.ErrNotExist.
func CheckSocketDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("socket directory %s: %w", dir, err)
	}
	return judgeDir(dir, fi)
}

// judgeDir is the directory verdict on what Lstat found.
func judgeDir(dir string, fi fs.FileInfo) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return &SocketDirError{Dir: dir, Fault: FaultSymlink}
	case !fi.IsDir():
		return &SocketDirError{Dir: dir, Fault: FaultNotDir}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return &SocketDirError{Dir: dir, Fault: FaultOwner, UID: -1}
	}
	if int(st.Uid) != os.Geteuid() {
		return &SocketDirError{Dir: dir, Fault: FaultOwner, UID: int(st.Uid)}
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return &SocketDirError{Dir: dir, Fault: FaultMode, Mode: fi.Mode()}
	}
	return nil
}

// PrepareSocketDir makes dir ready to hold the socket: a missing directory is created with
// mode 0700 in one step (missing parents get 0700 too) and then checked like an existing
// one (CheckSocketDir). It changes nothing in an existing directory.
func PrepareSocketDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return &SocketDirError{Dir: dir, Fault: FaultMissing, Err: errors.New("not an absolute path")}
	}
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := mkdirPrivate(dir); err != nil {
			return &SocketDirError{Dir: dir, Fault: FaultMissing, Err: err}
		}
	}
	return CheckSocketDir(dir)
}

// mkdirPrivate creates dir and every missing parent with mode 0700. Mkdir applies the
// umask, which can only take bits away, so no directory is ever more open than 0700; each
// directory it made is then set to exactly 0700 (owner bits a strict umask took away).
func mkdirPrivate(dir string) error {
	dir = filepath.Clean(dir)
	var made []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		made = append(made, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	for i := len(made) - 1; i >= 0; i-- {
		if err := os.Mkdir(made[i], 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := os.Chmod(made[i], 0o700); err != nil {
			return err
		}
	}
	return nil
}

// PrepareStateDir makes the daemon's state directory private at each start: created 0700
// (parents too) when missing; then it must be a real directory owned by the effective uid,
// and it is set to mode 0700. A directory that fails either refuses the start with a
// *SocketDirError naming it.
func PrepareStateDir(dir string) error {
	err := PrepareSocketDir(dir)
	var de *SocketDirError
	if err != nil && (!errors.As(err, &de) || de.Fault != FaultMode) {
		return asState(err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return &SocketDirError{Dir: dir, Fault: FaultMode, Err: err, What: "state directory"}
	}
	return asState(CheckSocketDir(dir))
}

// asState renames a directory verdict for the state directory.
func asState(err error) error {
	var de *SocketDirError
	if errors.As(err, &de) {
		c := *de
		c.What = "state directory"
		return &c
	}
	return err
}
