package protocol

import (
	"cmp"
	"fmt"

	"github.com/containerd/errdefs"
)

// The classes of frame errors; a *FrameError wraps exactly one of them.
var (
	// ErrMalformed: the line is not one JSON object of valid UTF-8 with unique keys.
	ErrMalformed = errdefs.ErrInvalidArgument.WithMessage("malformed frame")
	// ErrWrongEvent: the frame's event is not the one the decoder reads.
	ErrWrongEvent = errdefs.ErrInvalidArgument.WithMessage("wrong event")
	// ErrBadField: a field is missing, of the wrong JSON type, or out of its range.
	ErrBadField = errdefs.ErrInvalidArgument.WithMessage("bad field")
	// ErrVersion: a hello announces a protocol version this host does not speak.
	ErrVersion = errdefs.ErrFailedPrecondition.WithMessage("protocol version mismatch")
)

// FrameError is the error of every encoder and decoder in this package. Frame names the
// event or frame type ("stream", "host_reply", or "" when the line named none), Field the
// offending key ("" for the line as a whole). Err wraps one of ErrMalformed,
// ErrWrongEvent, ErrBadField or ErrVersion, so errors.Is tells the class.
type FrameError struct {
	Frame string
	Field string
	Err   error
}

// Error reports the frame, field and reason, e.g. `decode stream "name": bad field: ...`.
func (e *FrameError) Error() string {
	frame := cmp.Or(e.Frame, "frame")
	if e.Field == "" {
		return fmt.Sprintf("protocol %s: %v", frame, e.Err)
	}
	return fmt.Sprintf("protocol %s %q: %v", frame, e.Field, e.Err)
}

// Unwrap returns the class (and cause) of the error.
func (e *FrameError) Unwrap() error { return e.Err }

func badField(frame, field, format string, args ...any) error {
	return &FrameError{Frame: frame, Field: field, Err: fmt.Errorf("%w: "+format, append([]any{ErrBadField}, args...)...)}
}
