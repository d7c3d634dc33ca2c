package jobs

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
)

// ErrInvalidID is the class of a string that is not a job id.
var ErrInvalidID = errdefs.ErrInvalidArgument.WithMessage("invalid job id")

// ID names a job within its session: "j1", "j2", ... in the order the jobs started. IDs
// order numerically (j9 before j10): compare them as numbers, with <. The zero ID is no
// job.
type ID uint64

// String returns the id's text form, "j" and the number ("j12").
func (id ID) String() string { return "j" + strconv.FormatUint(uint64(id), 10) }

// ParseID parses the text form of an ID. It accepts only the form String writes: "j" and
// a decimal number from 1, without sign or leading zeros. Anything else is an
// ErrInvalidID error.
func ParseID(s string) (ID, error) {
	// ParseUint in base 10 takes digits only: no sign, no underscores.
	if digits, ok := strings.CutPrefix(s, "j"); ok && len(s) <= 21 && digits != "" && digits[0] != '0' {
		if n, err := strconv.ParseUint(digits, 10, 64); err == nil {
			return ID(n), nil
		}
	}
	return 0, fmt.Errorf("parse job id %q: %w", truncateForError(s), ErrInvalidID)
}

// truncateForError bounds an untrusted string quoted in an error.
func truncateForError(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return TakeScalars(s, max) + "..."
}

// MarshalText writes the text form.
func (id ID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText parses the text form (see ParseID).
func (id *ID) UnmarshalText(b []byte) error {
	v, err := ParseID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}
