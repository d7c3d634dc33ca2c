package reaper

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
)

// Status is how the kernel under a reaper ended.
type Status struct {
	// Code is the kernel's exit code, or -1 when a signal ended it.
	Code int
	// Signal is the signal that ended the kernel, or 0 when it exited.
	Signal syscall.Signal
}

// String renders s as "exit 3" or "signal killed".
func (s Status) String() string {
	if s.Signal != 0 {
		return "signal " + s.Signal.String()
	}
	return "exit " + strconv.Itoa(s.Code)
}

// exitCode is the code a reaper exits with for s: the kernel's code, or 128+signal as a
// shell would report it. The status pipe carries the exact status; this is for people.
func (s Status) exitCode() int {
	if s.Signal != 0 {
		return 128 + int(s.Signal)
	}
	return s.Code & 0xff
}

// ErrProtocol reports a status-pipe line the launcher cannot read.
var ErrProtocol = errors.New("bad reaper status line")

// maxLine bounds a status-pipe line, newline included.
const maxLine = 512

// The status pipe carries lines of three kinds, in this order:
//
//	pid <kernel pid>              the kernel started
//	err <errno> <text>            the kernel did not start (errno 0: not an errno)
//	exit <code> <signal>          the kernel ended and every descendant is gone
const (
	kindPID  = "pid"
	kindErr  = "err"
	kindExit = "exit"
)

// message is one parsed status-pipe line.
type message struct {
	kind   string
	pid    int
	errno  syscall.Errno
	text   string
	status Status
}

func formatPID(pid int) string { return fmt.Sprintf("%s %d\n", kindPID, pid) }

// formatErr renders err on one line, keeping its errno when it has one so the launcher can
// rebuild an error that errors.Is matches (fs.ErrNotExist, fs.ErrPermission, ...).
func formatErr(err error) string {
	var errno syscall.Errno
	errors.As(err, &errno)
	text := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, err.Error())
	return fmt.Sprintf("%s %d %s\n", kindErr, int(errno), text[:min(len(text), maxLine-32)])
}

func formatExit(s Status) string {
	return fmt.Sprintf("%s %d %d\n", kindExit, s.Code, int(s.Signal))
}

// parseMessage reads one line (without its newline) written by the format functions.
func parseMessage(line string) (message, error) {
	bad := func(why string) (message, error) {
		return message{}, fmt.Errorf("parse status %.64q: %s: %w", line, why, ErrProtocol)
	}
	kind, rest, _ := strings.Cut(line, " ")
	switch kind {
	case kindPID:
		pid, ok := atoi(rest)
		if !ok || pid < 1 {
			return bad("pid")
		}
		return message{kind: kind, pid: pid}, nil
	case kindErr:
		num, text, ok := strings.Cut(rest, " ")
		errno, ok2 := atoi(num)
		if !ok || !ok2 || errno > 4095 {
			return bad("errno")
		}
		return message{kind: kind, errno: syscall.Errno(errno), text: text}, nil
	case kindExit:
		c, s, ok := strings.Cut(rest, " ")
		code, ok2 := atoi(c)
		if c == "-1" {
			code, ok2 = -1, true
		}
		sig, ok3 := atoi(s)
		if !ok || !ok2 || !ok3 || sig > 64 || code > 255 {
			return bad("exit")
		}
		if (sig == 0) == (code == -1) {
			return bad("exit: want a code or a signal")
		}
		return message{kind: kind, status: Status{Code: code, Signal: syscall.Signal(sig)}}, nil
	}
	return bad("kind")
}

// atoi parses a canonical non-negative decimal (no sign, no leading zeros) below 1<<31.
func atoi(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 0 && n < 1<<31 && strconv.Itoa(n) == s
}
