package workspaces

import (
	"fmt"

	"github.com/containerd/errdefs"
)

// MaxFiles is the most files (and symlinks) an isolated workspace copies. A larger parent
// must be shared with the child instead.
const MaxFiles = 100_000

// The error classes of this package, checked with errors.Is.
var (
	// ErrTooManyFiles: the parent holds more than the limit of files; the child must use
	// the shared workspace mode. The error is a *TooManyFilesError.
	ErrTooManyFiles = errdefs.ErrFailedPrecondition.WithMessage("too many files for an isolated workspace")
	// ErrInvalidID: a workspace id is empty, too long, or holds a character outside
	// [A-Za-z0-9._-] (so never "/" nor "..").
	ErrInvalidID = errdefs.ErrInvalidArgument.WithMessage("invalid workspace id")
	// ErrExists: a workspace with that parent and id exists already.
	ErrExists = errdefs.ErrAlreadyExists.WithMessage("workspace exists")
	// ErrNotDirectory: the parent path is not a directory.
	ErrNotDirectory = errdefs.ErrInvalidArgument.WithMessage("not a directory")
	// ErrNotWorkspace: a path given as a workspace is not one this package made.
	ErrNotWorkspace = errdefs.ErrInvalidArgument.WithMessage("not a workspace")
	// ErrUnsafePath: a listing named a path that is absolute, holds "." or "..", is
	// empty, or lies under ".git".
	ErrUnsafePath = errdefs.ErrInvalidArgument.WithMessage("unsafe path in listing")
)

// TooManyFilesError reports a parent too large for an isolated workspace.
type TooManyFilesError struct {
	// Parent is the parent directory.
	Parent string
	// Limit is the limit that was passed.
	Limit int
}

// Error names the parent, the limit and the way out: the shared mode.
func (e *TooManyFilesError) Error() string {
	return fmt.Sprintf("workspace %s: more than %d files: an isolated copy is refused; use the shared workspace mode (workspace=\"shared\")", e.Parent, e.Limit)
}

// Is makes errors.Is(err, ErrTooManyFiles) true.
func (e *TooManyFilesError) Is(target error) bool { return target == ErrTooManyFiles }
