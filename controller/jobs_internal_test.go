package controller

import (
	"errors"
	"strings"
	"testing"

	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/protocol"
)

func TestJobEndFromTheKernelsFrame(t *testing.T) {
	n := func(v int) *int { return &v }
	for _, tc := range []struct {
		e    protocol.JobEnd
		want string
		err  error
	}{
		{protocol.JobEnd{ExitCode: n(0)}, "exit 0", nil},
		{protocol.JobEnd{ExitCode: n(255)}, "exit 255", nil},
		{protocol.JobEnd{Signal: n(9)}, "signal 9", nil},
		{protocol.JobEnd{}, "unknown", nil},
		{protocol.JobEnd{ExitCode: n(256)}, "unknown", jobs.ErrInvalidEnd},
		{protocol.JobEnd{ExitCode: n(-1)}, "unknown", jobs.ErrInvalidEnd},
	} {
		end, err := jobEnd(tc.e)
		if end.String() != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("jobEnd(%+v) = %v, %v", tc.e, end, err)
		}
	}
	for status, want := range map[string]string{"ok": "exit 0", "error": "exit 1", "interrupted": "interrupted", "?": "unknown"} {
		if got := cellEnd(status).String(); got != want {
			t.Errorf("cellEnd(%q) = %s, want %s", status, got, want)
		}
	}
}

func TestCheckCommandAndFirstLine(t *testing.T) {
	for cmd, ok := range map[string]bool{
		"":                                     true,
		"echo é":                               true,
		strings.Repeat("x", MaxCommandBytes):   true,
		strings.Repeat("x", MaxCommandBytes+1): false,
		"a\x00b":                               false,
		"\xc3":                                 false,
	} {
		if err := checkCommand(cmd); (err == nil) != ok || !ok && !errors.Is(err, ErrInvalidCommand) {
			t.Errorf("checkCommand(%.20q) = %v", cmd, err)
		}
	}
	for code, want := range map[string]string{"\n  \nimport x\ny": "import x", "": "", "x = 1": "x = 1"} {
		if got := firstLine(code); got != want {
			t.Errorf("firstLine(%q) = %q, want %q", code, got, want)
		}
	}
}
