package reaper

import (
	"errors"
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestConfigRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := config{
			parent: rapid.IntRange(1, 1<<22).Draw(t, "parent"),
			grace:  time.Duration(rapid.Int64Range(0, maxGrace.Milliseconds()).Draw(t, "ms")) * time.Millisecond,
		}
		got, err := parseConfig(c.encode())
		if err != nil {
			t.Fatalf("parse %q: %v", c.encode(), err)
		}
		if got != c {
			t.Fatalf("round trip %+v -> %+v", c, got)
		}
	})
}

func TestConfigRefusesMalformed(t *testing.T) {
	for _, s := range []string{
		"", "1", "1,2", "1,2,3,4", "2,100,5", "1,0,5", "1,-3,5", "1,100,-1", "1,+100,5",
		"1,0100,5", "1,100,5 ", " 1,100,5", "1,100,99999999999", "1,99999999,5", "1,100,1e3",
		"01,100,5",
	} {
		if _, err := parseConfig(s); !errors.Is(err, ErrConfig) {
			t.Errorf("parseConfig(%q) = %v, want ErrConfig", s, err)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{"1,100,2000", "1,1,0", "", "1,,", "1,100,5,", "9,9,9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseConfig(s)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v is not ErrConfig", err)
			}
			return
		}
		// Only the canonical form is accepted.
		if c.encode() != s {
			t.Fatalf("accepted %q, which encodes back as %q", s, c.encode())
		}
	})
}

func genStatus(t *rapid.T) Status {
	if rapid.Bool().Draw(t, "signaled") {
		return Status{Code: -1, Signal: syscall.Signal(rapid.IntRange(1, 64).Draw(t, "sig"))}
	}
	return Status{Code: rapid.IntRange(0, 255).Draw(t, "code")}
}

func TestStatusLinesRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		st := genStatus(t)
		m, err := parseMessage(strings.TrimSuffix(formatExit(st), "\n"))
		if err != nil || m.kind != kindExit || m.status != st {
			t.Fatalf("exit %v: got %+v, %v", st, m, err)
		}
		pid := rapid.IntRange(1, 1<<22).Draw(t, "pid")
		m, err = parseMessage(strings.TrimSuffix(formatPID(pid), "\n"))
		if err != nil || m.kind != kindPID || m.pid != pid {
			t.Fatalf("pid %d: got %+v, %v", pid, m, err)
		}
		text := rapid.String().Draw(t, "text")
		errno := syscall.Errno(rapid.IntRange(0, 133).Draw(t, "errno"))
		var e error = errors.New(text)
		if errno != 0 {
			e = errors.Join(e, errno)
		}
		line := formatErr(e)
		if strings.Count(line, "\n") != 1 || len(line) > maxLine {
			t.Fatalf("formatErr made %q: not one bounded line", line)
		}
		m, err = parseMessage(strings.TrimSuffix(line, "\n"))
		if err != nil || m.kind != kindErr || m.errno != errno {
			t.Fatalf("err %q: got %+v, %v", line, m, err)
		}
	})
}

func TestStatusExitCode(t *testing.T) {
	for _, c := range []struct {
		st   Status
		want int
	}{
		{Status{Code: 0}, 0}, {Status{Code: 3}, 3}, {Status{Code: -1, Signal: syscall.SIGKILL}, 137},
		{Status{Code: -1, Signal: syscall.SIGTERM}, 143},
	} {
		if got := c.st.exitCode(); got != c.want {
			t.Errorf("%v.exitCode() = %d, want %d", c.st, got, c.want)
		}
	}
}

func TestFormatErrKeepsErrno(t *testing.T) {
	line := formatErr(&fs.PathError{Op: "fork/exec", Path: "/nope", Err: syscall.ENOENT})
	m, err := parseMessage(strings.TrimSuffix(line, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(m.errno, fs.ErrNotExist) {
		t.Fatalf("errno %v does not match fs.ErrNotExist", m.errno)
	}
}

func TestParseMessageRefusesMalformed(t *testing.T) {
	for _, s := range []string{
		"", "pid", "pid 0", "pid -1", "pid 01", "pid 1 2", "pid x", "exit", "exit 0", "exit 0 0 0",
		"exit -1 0", "exit 3 9", "exit 256 0", "exit 0 65", "err", "err x y", "err 5000 y",
		"what 1", "PID 3", "exit -2 9",
	} {
		if m, err := parseMessage(s); !errors.Is(err, ErrProtocol) {
			t.Errorf("parseMessage(%q) = %+v, %v; want ErrProtocol", s, m, err)
		}
	}
}

func FuzzParseMessage(f *testing.F) {
	for _, s := range []string{"pid 12", "err 2 start: no such file", "exit 0 0", "exit -1 9", "exit 1 1", "err 0 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseMessage(s)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v is not ErrProtocol", err)
			}
			return
		}
		var back string
		switch m.kind {
		case kindPID:
			back = formatPID(m.pid)
		case kindExit:
			back = formatExit(m.status)
		case kindErr:
			return // text is free-form
		}
		if back != s+"\n" {
			t.Fatalf("accepted %q, which formats back as %q", s, back)
		}
	})
}
