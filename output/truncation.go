package output

import (
	"cmp"
	"fmt"

	"github.com/containerd/errdefs"
)

// Default limits of a Truncation that is On: the window a tool result, a cell or a job
// reports.
const (
	DefaultBytes = 50 << 10 // 50 KiB
	DefaultLines = 2000
)

// ErrInvalidLimits is the class of a Truncation whose limits cannot bound anything
// (a negative byte or line count, or an unknown Keep).
var ErrInvalidLimits = errdefs.ErrInvalidArgument.WithMessage("invalid output limits")

// Keep says which end of an output a bounded window keeps.
type Keep uint8

const (
	// Head keeps whole lines from the start; it is the zero value.
	Head Keep = iota
	// Tail keeps whole lines from the end.
	Tail
)

// String returns "head" or "tail".
func (k Keep) String() string {
	switch k {
	case Head:
		return "head"
	case Tail:
		return "tail"
	}
	return fmt.Sprintf("keep(%d)", uint8(k))
}

// Limits bound a window: at most Bytes bytes and at most Lines lines, taken from the end
// Keep names. A zero Bytes or Lines means the default (DefaultBytes, DefaultLines).
type Limits struct {
	Bytes int64
	Lines int64
	Keep  Keep
}

// Truncation is the one setting that bounds every output (a tool call's, a cell's, a
// job's): On(limits) keeps at most the limits and counts the rest as dropped; Off keeps
// every byte. The zero value is On with the default limits (50 KiB, 2000 lines, head).
// A Truncation is a small value; copy it freely.
type Truncation struct {
	off    bool
	limits Limits
}

// On returns a Truncation that keeps at most l. Zero fields of l take the defaults; a
// negative field or an unknown Keep makes the Truncation invalid (see Validate), and
// NewBounder refuses it.
func On(l Limits) Truncation { return Truncation{limits: l} }

// Off returns the explicit opt-out: every byte is kept, nothing is dropped and no artifact
// is written. A Bounder's memory then grows with the output: Off is for callers that
// asked for it. A Capture's report (Capture.Bound) under Off keeps every byte the capture
// retained, and counts the rest as dropped.
func Off() Truncation { return Truncation{off: true} }

// Default returns On with the default limits; it equals the zero Truncation.
func Default() Truncation { return Truncation{} }

// IsOff reports whether t is the opt-out.
func (t Truncation) IsOff() bool { return t.off }

// Limits returns the limits of an On truncation with defaults filled in, and the zero
// Limits for Off.
func (t Truncation) Limits() Limits {
	if t.off {
		return Limits{}
	}
	l := t.limits
	l.Bytes = cmp.Or(l.Bytes, DefaultBytes)
	l.Lines = cmp.Or(l.Lines, DefaultLines)
	return l
}

// Validate reports, as an ErrInvalidLimits error, why t cannot bound an output.
func (t Truncation) Validate() error {
	if t.off {
		return nil
	}
	l := t.limits
	switch {
	case l.Bytes < 0:
		return fmt.Errorf("truncation bytes %d: %w", l.Bytes, ErrInvalidLimits)
	case l.Lines < 0:
		return fmt.Errorf("truncation lines %d: %w", l.Lines, ErrInvalidLimits)
	case l.Keep != Head && l.Keep != Tail:
		return fmt.Errorf("truncation keep %d: %w", uint8(l.Keep), ErrInvalidLimits)
	}
	return nil
}

// String describes t: "off" or "on(51200 bytes, 2000 lines, head)".
func (t Truncation) String() string {
	if t.off {
		return "off"
	}
	l := t.Limits()
	return fmt.Sprintf("on(%d bytes, %d lines, %s)", l.Bytes, l.Lines, l.Keep)
}

// Resolve is the one place a call's truncation is decided. The call's own value wins
// when it is set (non-nil); otherwise the session's value applies; with neither, the
// default. Both values come from the controller's trusted configuration and API callers,
// never from a kernel.
func Resolve(session, call *Truncation) Truncation {
	switch {
	case call != nil:
		return *call
	case session != nil:
		return *session
	}
	return Default()
}
