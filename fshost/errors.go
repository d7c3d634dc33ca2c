package fshost

import (
	"errors"
	"fmt"

	"github.com/kennel-dev/kennel/pathmap"
)

// codeError is a sentinel error that carries its protocol code.
type codeError struct{ code, text string }

func (e *codeError) Error() string { return e.text }

// Code is the protocol code of the sentinel.
func (e *codeError) Code() string { return e.code }

// The handler error classes (path refusals and file system errors are pathmap's:
// pathmap.ErrOutside, pathmap.ErrReadOnly, pathmap.ErrNotFound, ...). Every error a
// Server returns is a *pathmap.FsError whose Code is one of the protocol codes and whose
// Err chain holds the sentinel, so errors.Is works.
var (
	// ErrInvalid: the arguments are malformed (bad JSON, a bad regexp or glob, a negative
	// offset, an empty edit). It is pathmap.ErrInvalid: one class, one code.
	ErrInvalid = pathmap.ErrInvalid
	// ErrUnserved: the request type is not an fs.* type this Server serves.
	ErrUnserved error = &codeError{"unserved", "request type not served"}
	// ErrBinary: the file is not text (a NUL byte in its first 8 KiB, or invalid UTF-8).
	ErrBinary error = &codeError{"binary", "binary file"}
	// ErrNoMatch: an edit's old text is not in the file.
	ErrNoMatch error = &codeError{"no_match", "edit text not found"}
	// ErrAmbiguous: an edit's old text is in the file more than once.
	ErrAmbiguous error = &codeError{"ambiguous", "edit text found more than once"}
	// ErrTooLarge: the file is larger than the handler reads whole (MaxEditBytes).
	ErrTooLarge error = &codeError{"too_large", "file too large"}
)

// fail returns an FsError of the class sentinel (one of this package's or pathmap's) for
// op on the sandbox path p, with a message made of format and args (which must not name
// host paths).
func fail(op, p string, sentinel error, format string, args ...any) error {
	err := sentinel
	if format != "" {
		err = fmt.Errorf(format+": %w", append(args, sentinel)...)
	}
	fe := &pathmap.FsError{Op: op, Path: p, Reason: sentinel.(interface{ Code() string }).Code(), Err: err}
	if fe.Reason == "outside" || fe.Reason == "read_only" {
		fe.Version = pathmap.Version
	}
	return fe
}

// errClass returns the class of an error met while reading or writing: the class of a
// pathmap error, else pathmap.ErrInternal.
func errClass(err error) error {
	for _, s := range []error{pathmap.ErrNotFound, pathmap.ErrDenied, pathmap.ErrChanged, pathmap.ErrInvalid} {
		if errors.Is(err, s) {
			return s
		}
	}
	return pathmap.ErrInternal
}

// ErrorInfo is what a host_reply carries for a failed request (docs/protocol.md).
type ErrorInfo struct {
	// Code is the protocol code ("outside", "not_found", "binary", ...).
	Code string `json:"code"`
	// Message is for people, never matched; at most MaxMessage bytes.
	Message string `json:"message"`
	// Reason and Version are set on path refusals (outside, read_only).
	Reason  string `json:"reason,omitempty"`
	Version string `json:"version,omitempty"`
}

// MaxMessage bounds ErrorInfo.Message.
const MaxMessage = 1024

// Describe turns any error into the error part of a host_reply: the code of the first
// error in its chain that has a Code method (else "internal"), its message cut to
// MaxMessage bytes, and the reason and version of a path refusal.
func Describe(err error) ErrorInfo {
	info := ErrorInfo{Code: "internal", Message: err.Error()}
	var coded interface{ Code() string }
	if errors.As(err, &coded) {
		info.Code = coded.Code()
	}
	var fe *pathmap.FsError
	if errors.As(err, &fe) && fe.Version != "" {
		info.Reason, info.Version = fe.Reason, fe.Version
	}
	if len(info.Message) > MaxMessage {
		info.Message = cutUTF8(info.Message, MaxMessage-3) + "..."
	}
	return info
}
