package fshost

import (
	"errors"
	"fmt"

	"github.com/kennel-dev/kennel/fshost/fsroot"
)

// fail returns an error of class c (an fsroot class) for op on the sandbox path p, with
// a message made of format and args (which must not name host paths).
func fail(op, p string, c error, format string, args ...any) error {
	var cause error
	if format != "" {
		cause = fmt.Errorf(format, args...)
	}
	return fsroot.NewError(op, p, c, cause)
}

// errClass returns the class of an error met while reading: the class of a Root's
// error, else fsroot.ErrInternal.
func errClass(err error) error {
	for _, c := range []error{fsroot.ErrNotFound, fsroot.ErrDenied, fsroot.ErrChanged, fsroot.ErrInvalid} {
		if errors.Is(err, c) {
			return c
		}
	}
	return fsroot.ErrInternal
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
	var fe *fsroot.Error
	if errors.As(err, &fe) && fe.Version != "" {
		info.Reason, info.Version = fe.Reason, fe.Version
	}
	if len(info.Message) > MaxMessage {
		info.Message = cutUTF8(info.Message, MaxMessage-3) + "..."
	}
	return info
}
