package pathmap

import (
	"errors"
	"strconv"
	"syscall"
)

// Version is the protocol version carried by path refusals (reason outside or read_only).
const Version = "transport@1"

// codeError is a sentinel error that carries its protocol code.
type codeError struct{ code, text string }

func (e *codeError) Error() string { return e.text }

// Code is the protocol code of the sentinel.
func (e *codeError) Code() string { return e.code }

// The error classes of the path map. Every error the package returns is an *FsError whose
// Err chain holds exactly one of these, so errors.Is(err, ErrOutside) and friends work, and
// whose Code (= Reason) is the sentinel's code.
var (
	// ErrOutside: the path (or a symlink on the way) leads outside every mount, or is
	// relative to the sandbox home (~). Code "outside", with Version.
	ErrOutside error = &codeError{"outside", "outside every mount"}
	// ErrReadOnly: a write, edit or rename in a read-only mount. Code "read_only", with Version.
	ErrReadOnly error = &codeError{"read_only", "read-only mount"}
	// ErrNotFound: a component does not exist, or is not a directory where one is needed.
	ErrNotFound error = &codeError{"not_found", "no such file or directory"}
	// ErrLoop: more than MaxSymlinks symlinks were followed.
	ErrLoop error = &codeError{"loop", "too many levels of symbolic links"}
	// ErrInvalid: the path cannot name what the operation needs (empty, NUL byte, too long,
	// a directory where a file is needed, a mount root to be renamed, ...).
	ErrInvalid error = &codeError{"invalid", "invalid path"}
	// ErrExists: a rename's destination already exists.
	ErrExists error = &codeError{"exists", "destination exists"}
	// ErrCrossDevice: a rename across file systems of something that is not a regular file.
	ErrCrossDevice error = &codeError{"cross_device", "rename across file systems"}
	// ErrChanged: the path kept changing between its check and its use (a symlink was
	// swapped in), so it was not used.
	ErrChanged error = &codeError{"changed", "path changed while in use"}
	// ErrDenied: the host refused access (EACCES, EPERM), or a new file or directory
	// could not be given to the Map's Owner (then nothing was written).
	ErrDenied error = &codeError{"denied", "permission denied"}
	// ErrNoSpace: the host's file system is full, or a disk quota is used up (ENOSPC,
	// EDQUOT). A write that meets it leaves the old content and no partial file.
	ErrNoSpace error = &codeError{"no_space", "disk full or quota exceeded"}
	// ErrInternal: any other host failure (I/O errors, out of descriptors, ...).
	ErrInternal error = &codeError{"internal", "host file system error"}
)

// FsError is the one error type of the path map and the fs.* handlers. It says which
// operation failed on which sandbox path, and why as a protocol code (Reason). A refusal
// because of where a path leads (Reason "outside" or "read_only") also carries Version.
//
// Err always wraps one of the package's sentinel errors (ErrOutside, ...), sometimes
// joined with the underlying errno; FsError's message names sandbox paths only, never the
// host paths behind them.
type FsError struct {
	// Op is what was being done: "map", "cwd", "read", "write", "edit", "rename", "grep", ...
	Op string
	// Path is the sandbox path involved, made absolute against the cwd where possible.
	Path string
	// Reason is the protocol code ("outside", "read_only", "not_found", ...).
	Reason string
	// Version is "transport@1" for path refusals (outside, read_only), else "".
	Version string
	// Err is the cause; it wraps the sentinel of Reason.
	Err error
}

// maxErrPath bounds how much of a hostile path an error message repeats.
const maxErrPath = 512

// Error returns "op path: cause", with the path quoted (and cut) so that control bytes from
// the sandbox cannot forge lines in logs.
func (e *FsError) Error() string {
	p := e.Path
	if len(p) > maxErrPath {
		p = p[:maxErrPath] + "..."
	}
	s := e.Op
	if e.Path != "" {
		s += " " + strconv.Quote(p)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *FsError) Unwrap() error { return e.Err }

// Code returns the protocol code of the error (its Reason).
func (e *FsError) Code() string { return e.Reason }

// Refusal returns the reason and version a path refusal carries across the protocol
// ("outside" or "read_only", and "transport@1"); version is "" for other errors.
func (e *FsError) Refusal() (reason, version string) { return e.Reason, e.Version }

// newErr builds an FsError of the class sentinel, wrapping cause (which may be nil) with
// the sentinel so that errors.Is works on both.
func newErr(op, path string, sentinel error, cause error) *FsError {
	code := sentinel.(*codeError).code
	e := &FsError{Op: op, Path: path, Reason: code, Err: sentinel}
	if code == "outside" || code == "read_only" {
		e.Version = Version
	}
	if cause != nil {
		e.Err = &causeError{sentinel: sentinel, cause: cause}
	}
	return e
}

// causeError joins a sentinel with a more specific cause; its message is the cause's.
type causeError struct {
	sentinel error
	cause    error
}

func (e *causeError) Error() string {
	return e.cause.Error() + ": " + e.sentinel.Error()
}

func (e *causeError) Unwrap() []error { return []error{e.sentinel, e.cause} }

// detail is a cause that is only a message (no errno).
type detail string

func (d detail) Error() string { return string(d) }

// errnoClass maps an errno from the host to the error class it belongs to.
func errnoClass(err error) error {
	var oe *ownerError
	if errors.As(err, &oe) {
		return ErrDenied
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return ErrInternal
	}
	switch errno {
	case syscall.ENOENT, syscall.ENOTDIR:
		return ErrNotFound
	case syscall.ELOOP:
		return ErrLoop
	case syscall.EACCES, syscall.EPERM:
		return ErrDenied
	case syscall.EROFS:
		return ErrReadOnly
	case syscall.ENAMETOOLONG, syscall.EISDIR, syscall.EINVAL:
		return ErrInvalid
	case syscall.EEXIST, syscall.ENOTEMPTY:
		return ErrExists
	case syscall.EXDEV:
		return ErrCrossDevice
	case syscall.ENOSPC, syscall.EDQUOT:
		return ErrNoSpace
	}
	return ErrInternal
}

// fromErrno wraps a host errno as an FsError of its class.
func fromErrno(op, path string, err error) *FsError {
	var fe *FsError
	if errors.As(err, &fe) {
		return fe
	}
	return newErr(op, path, errnoClass(err), err)
}
