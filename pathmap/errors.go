package pathmap

import (
	"errors"
	"syscall"

	"github.com/kennel-dev/kennel/fshost/fsroot"
)

// Version is the protocol version carried by path refusals (reason outside or read_only).
const Version = fsroot.Version

// The error classes of the path map are fsroot's (see there for what each means and the
// errdefs class it is), under the names this package has always given them. Every error
// the package returns is an *FsError whose Err chain holds exactly one of these, so
// errors.Is(err, ErrOutside) and friends work, and whose Code (= Reason) is the class's
// protocol code; ErrOutside and ErrReadOnly refusals carry Version.
var (
	ErrOutside     = fsroot.ErrOutside     // outside every mount, or relative to ~
	ErrReadOnly    = fsroot.ErrReadOnly    // a change in a read-only mount
	ErrNotFound    = fsroot.ErrNotFound    // missing, or not a directory where one is needed
	ErrLoop        = fsroot.ErrLoop        // more than MaxSymlinks symlinks
	ErrInvalid     = fsroot.ErrInvalid     // a path that cannot name what the operation needs
	ErrExists      = fsroot.ErrExists      // a rename's destination exists
	ErrCrossDevice = fsroot.ErrCrossDevice // a rename across file systems of a non-regular file
	ErrChanged     = fsroot.ErrChanged     // the path changed between its check and its use
	ErrDenied      = fsroot.ErrDenied      // EACCES, EPERM, or an Owner that could not be given
	ErrNoSpace     = fsroot.ErrNoSpace     // ENOSPC, EDQUOT: the old content is kept
	ErrInternal    = fsroot.ErrInternal    // any other host failure
)

// FsError is the one error type of the path map: fsroot.Error. It says which operation
// failed on which sandbox path (never the host path behind it), and why as a protocol
// code (Reason); a refusal because of where a path leads also carries Version.
type FsError = fsroot.Error

// newErr builds an FsError of the class sentinel, joined with cause (which may be nil).
func newErr(op, path string, sentinel, cause error) *FsError {
	return fsroot.NewError(op, path, sentinel, cause)
}

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
