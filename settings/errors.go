package settings

import (
	"fmt"
	"strconv"

	"github.com/containerd/errdefs"
)

// The error classes of the package. Every error it returns matches one of them with
// errors.Is.
var (
	// ErrUnreadable: a settings file exists but cannot be read, is not a JSON object, has
	// a duplicate key, is over MaxFileSize, or has a version this build does not know. A
	// reader applies nothing from it; a writer writes nothing over it.
	ErrUnreadable = errdefs.ErrFailedPrecondition.WithMessage("settings file unreadable")
	// ErrBadValue: a leaf whose value its setting does not hold (wrong type, out of range).
	ErrBadValue = errdefs.ErrInvalidArgument.WithMessage("bad value")
	// ErrUndeclared: a key no setting declares.
	ErrUndeclared = errdefs.ErrInvalidArgument.WithMessage("undeclared key")
	// ErrWithheld: a project key not applied: the project is not trusted and the key runs
	// code or sets a limit, or the key is global-only.
	ErrWithheld = errdefs.ErrPermissionDenied.WithMessage("withheld")
	// ErrScope: a writer asked to set a global-only key in a project file.
	ErrScope = errdefs.ErrInvalidArgument.WithMessage("global-only key")
)

// Problem is one leaf, key or file of a settings document that does not apply, and why.
// Loading reports every one; none is lost in silence.
type Problem struct {
	// File is the settings file's path.
	File string
	// Pointer is the JSON pointer (RFC 6901) of the leaf in the file ("/kernelTransport/
	// argvPrefix"), or "" for the whole file.
	Pointer string
	// Err says why; it matches one of the package's error classes.
	Err error
}

// Error returns "file pointer: why".
func (p *Problem) Error() string {
	if p.Pointer == "" {
		return fmt.Sprintf("%s: %v", p.File, p.Err)
	}
	return fmt.Sprintf("%s %s: %v", p.File, strconv.Quote(p.Pointer), p.Err)
}

// Unwrap returns the cause.
func (p *Problem) Unwrap() error { return p.Err }
