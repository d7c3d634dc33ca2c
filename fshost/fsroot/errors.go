package fsroot

import (
	"errors"
	"strconv"

	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/protocol"
)

// Version is the protocol version a path refusal (reason outside or read_only) carries.
const Version = "transport@1"

// class is an error class: a protocol code, a message, and the errdefs class it is.
type class struct {
	code protocol.Code
	text string
	kind error
}

func (c *class) Error() string { return c.text }

// Unwrap returns the errdefs class, so errdefs.IsNotFound and friends see it.
func (c *class) Unwrap() error { return c.kind }

// Code returns the class's protocol code.
func (c *class) Code() string { return string(c.code) }

// The classes. Every *Error wraps exactly one; each is the errdefs class named beside it.
var (
	// ErrOutside: the path (or a symlink on the way) leads outside every served
	// directory, or is relative to the sandbox home (~). Code outside, with Version;
	// errdefs.ErrPermissionDenied.
	ErrOutside error = &class{protocol.CodeOutside, "outside every mount", errdefs.ErrPermissionDenied}
	// ErrReadOnly: a change below a read-only directory. Code read_only, with Version;
	// errdefs.ErrPermissionDenied.
	ErrReadOnly error = &class{protocol.CodeReadOnly, "read-only mount", errdefs.ErrPermissionDenied}
	// ErrNotFound: a component does not exist, or is not a directory where one is
	// needed. errdefs.ErrNotFound.
	ErrNotFound error = &class{protocol.CodeNotFound, "no such file or directory", errdefs.ErrNotFound}
	// ErrLoop: more than MaxSymlinks symlinks were followed. errdefs.ErrInvalidArgument.
	ErrLoop error = &class{protocol.CodeLoop, "too many levels of symbolic links", errdefs.ErrInvalidArgument}
	// ErrInvalid: the arguments or the path cannot do what the operation needs (empty, a
	// NUL byte, too long, a directory where a file is needed, a served root to be
	// renamed, a bad pattern, ...). errdefs.ErrInvalidArgument.
	ErrInvalid error = &class{protocol.CodeInvalid, "invalid path", errdefs.ErrInvalidArgument}
	// ErrExists: a rename's destination exists. errdefs.ErrAlreadyExists.
	ErrExists error = &class{protocol.CodeExists, "destination exists", errdefs.ErrAlreadyExists}
	// ErrCrossDevice: a rename across file systems of something that is not a regular
	// file. errdefs.ErrFailedPrecondition.
	ErrCrossDevice error = &class{protocol.CodeCrossDevice, "rename across file systems", errdefs.ErrFailedPrecondition}
	// ErrChanged: the path kept changing between its check and its use (a symlink was
	// swapped in), so it was not used; the request may be retried. errdefs.ErrAborted.
	ErrChanged error = &class{protocol.CodeChanged, "path changed while in use", errdefs.ErrAborted}
	// ErrDenied: the host refused access, or a new file could not be given to its owner
	// (then nothing was written). errdefs.ErrPermissionDenied.
	ErrDenied error = &class{protocol.CodeDenied, "permission denied", errdefs.ErrPermissionDenied}
	// ErrNoSpace: the file system is full or a disk quota is used up; the file written
	// keeps its old content and no partial file is left. errdefs.ErrResourceExhausted.
	ErrNoSpace error = &class{protocol.CodeNoSpace, "disk full or quota exceeded", errdefs.ErrResourceExhausted}
	// ErrInternal: any other host failure. errdefs.ErrInternal.
	ErrInternal error = &class{protocol.CodeInternal, "host file system error", errdefs.ErrInternal}
	// ErrUnserved: a request type no handler serves. errdefs.ErrNotImplemented.
	ErrUnserved error = &class{protocol.CodeUnserved, "request type not served", errdefs.ErrNotImplemented}
	// ErrBinary: a text operation on a file that is not text (a NUL byte in its first
	// 8 KiB, or invalid UTF-8). errdefs.ErrFailedPrecondition.
	ErrBinary error = &class{protocol.CodeBinary, "binary file", errdefs.ErrFailedPrecondition}
	// ErrNoMatch: an edit's old text is not in the file. errdefs.ErrFailedPrecondition.
	ErrNoMatch error = &class{protocol.CodeNoMatch, "edit text not found", errdefs.ErrFailedPrecondition}
	// ErrAmbiguous: an edit's old text is in the file more than once.
	// errdefs.ErrFailedPrecondition.
	ErrAmbiguous error = &class{protocol.CodeAmbiguous, "edit text found more than once", errdefs.ErrFailedPrecondition}
	// ErrTooLarge: the file is larger than the handler reads whole. errdefs.ErrOutOfRange.
	ErrTooLarge error = &class{protocol.CodeTooLarge, "file too large", errdefs.ErrOutOfRange}
)

// Classes lists every class, for tests and documentation.
func Classes() []error {
	return []error{ErrOutside, ErrReadOnly, ErrNotFound, ErrLoop, ErrInvalid, ErrExists, ErrCrossDevice,
		ErrChanged, ErrDenied, ErrNoSpace, ErrInternal, ErrUnserved, ErrBinary, ErrNoMatch, ErrAmbiguous, ErrTooLarge}
}

// Error is the one error type of what crosses to a kernel from the file system side: it
// says which operation failed on which sandbox path, and why as a protocol code
// (Reason, also Code). A refusal because of where a path leads (outside, read_only) also
// carries Version. Its message names sandbox paths only, never host paths.
//
// Err always wraps one class (ErrOutside, ...), sometimes joined with a more specific
// cause (an errno, a message), so errors.Is works on both.
type Error struct {
	// Op is what was being done: "map", "cwd", "open", "write", "rename", "fs.edit move 0", ...
	Op string
	// Path is the sandbox path involved, made absolute against the cwd where possible.
	Path string
	// Reason is the protocol code ("outside", "read_only", "not_found", ...).
	Reason string
	// Version is Version for path refusals (outside, read_only), else "".
	Version string
	// Err is the cause; it wraps the class of Reason.
	Err error
}

// maxErrPath bounds how much of a hostile path an error message repeats.
const maxErrPath = 512

// Error returns "op path: cause", with the path quoted (and cut) so that control bytes
// from the sandbox cannot forge lines in logs.
func (e *Error) Error() string {
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
func (e *Error) Unwrap() error { return e.Err }

// Code returns the protocol code of the error (its Reason).
func (e *Error) Code() string { return e.Reason }

// Refusal returns the reason and version a path refusal carries across the protocol
// ("outside" or "read_only", and Version); version is "" for other errors.
func (e *Error) Refusal() (reason, version string) { return e.Reason, e.Version }

// NewError returns an Error of class c (one of this package's classes) for op on the
// sandbox path p. cause, which may be nil, is joined with the class: its message comes
// first ("cause: class") and errors.Is sees both. cause must not name host paths.
func NewError(op, p string, c, cause error) *Error {
	code := string(protocol.CodeInternal)
	var cl *class
	if errors.As(c, &cl) {
		code = string(cl.code)
	}
	e := &Error{Op: op, Path: p, Reason: code, Err: c}
	if code == string(protocol.CodeOutside) || code == string(protocol.CodeReadOnly) {
		e.Version = Version
	}
	if cause != nil {
		e.Err = &causeError{class: c, cause: cause}
	}
	return e
}

// causeError joins a class with a more specific cause; its message is the cause's.
type causeError struct {
	class error
	cause error
}

func (e *causeError) Error() string { return e.cause.Error() + ": " + e.class.Error() }

func (e *causeError) Unwrap() []error { return []error{e.class, e.cause} }
