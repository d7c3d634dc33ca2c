package images

import (
	"errors"
	"fmt"

	"github.com/containerd/errdefs"
)

// ErrBadPath reports a bundle file path that is not clean, relative and unique.
var ErrBadPath = errors.New("bad bundle path")

// ErrUnsafeCache reports a cache directory that another user could change: not a
// directory, a symlink, owned by another user, or writable by group or others.
var ErrUnsafeCache = errors.New("unsafe bundle cache directory")

// ErrNoPython reports that no usable Python interpreter (3.9 or newer) was found. It is
// of class errdefs.ErrUnavailable (which transports.ErrUnavailable is), so a caller that
// decides on "this cannot start here" needs no list of packages. A *PythonError carries
// the details and the fix.
var ErrNoPython = fmt.Errorf("no python interpreter: %w", errdefs.ErrUnavailable)

// PythonError says which interpreter was asked for, why it cannot be used, and what to
// install. It matches ErrNoPython with errors.Is.
type PythonError struct {
	// Name is the interpreter as asked for ("python3", "/opt/venv/bin/python").
	Name string
	// Reason says what went wrong ("not found on PATH", "is Python 3.8.10").
	Reason string
	// Err is the underlying error, or nil.
	Err error
}

// Error names the interpreter, the reason and the fix.
func (e *PythonError) Error() string {
	msg := fmt.Sprintf("python %q: %s: install Python 3.9 or newer (e.g. `apt-get install python3`) or name one that is", e.Name, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is reports whether target is ErrNoPython or errdefs.ErrUnavailable.
func (e *PythonError) Is(target error) bool {
	return target == ErrNoPython || target == errdefs.ErrUnavailable
}

// Unwrap returns the underlying error.
func (e *PythonError) Unwrap() error { return e.Err }

// ErrBootstrap reports a bootstrap payload that cannot be made.
var ErrBootstrap = errors.New("bootstrap")
