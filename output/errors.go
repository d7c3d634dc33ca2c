package output

import (
	"fmt"

	"github.com/containerd/errdefs"
)

// Error classes of a Capture's reads and saves; match them with errors.Is.
var (
	// ErrPageTooLarge: a page read asked for more than MaxPage bytes. It is refused, not
	// shortened.
	ErrPageTooLarge = errdefs.ErrInvalidArgument.WithMessage("page too large")
	// ErrLost: the bytes asked for were not retained (past the spill limit and not in the
	// tail, or the spill failed). Refused, not shortened.
	ErrLost = errdefs.ErrDataLoss.WithMessage("output not retained")
	// ErrPastEnd: a read of a closed capture starts past its last byte.
	ErrPastEnd = errdefs.ErrOutOfRange.WithMessage("offset past the end of output")
	// ErrInvalidRange: a negative offset or limit.
	ErrInvalidRange = errdefs.ErrInvalidArgument.WithMessage("invalid range")
	// ErrSpillLost: the spill file is missing or shorter than what was written to it.
	ErrSpillLost = errdefs.ErrDataLoss.WithMessage("spill file missing or shortened")
	// ErrRunning: the capture is still being written (Save needs a closed capture).
	ErrRunning = errdefs.ErrFailedPrecondition.WithMessage("output still running")
)

// Span is a byte range of an output: Limit bytes from Offset.
type Span struct {
	Offset, Limit int64
}

// ReadError is a refused page read or save. It matches its class (Err) with errors.Is,
// and names in Use a read that works, when there is one.
type ReadError struct {
	// Op is "read" or "save".
	Op string
	// Offset and Limit are the refused request (Limit is the output length for a save).
	Offset, Limit int64
	// Err is the class: ErrPageTooLarge, ErrLost, ErrPastEnd, ErrInvalidRange,
	// ErrSpillLost or ErrRunning.
	Err error
	// Detail says what is missing ("bytes 1048576..16777215 were not retained").
	Detail string
	// Use is a read that works instead, or nil when none does.
	Use *Span
}

// Error reads like "read offset=0 limit=65537: read at most 65536 bytes: use offset=0
// limit=65536".
func (e *ReadError) Error() string {
	why := e.Detail // the class's text only without one: a ReadError with Detail needs no Err
	if why == "" {
		why = e.Err.Error()
	}
	msg := fmt.Sprintf("%s offset=%d limit=%d: %s", e.Op, e.Offset, e.Limit, why)
	if e.Use != nil {
		msg += fmt.Sprintf(": use offset=%d limit=%d", e.Use.Offset, e.Use.Limit)
	}
	return msg
}

// Unwrap returns the class.
func (e *ReadError) Unwrap() error { return e.Err }
