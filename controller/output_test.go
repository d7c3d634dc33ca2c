package controller

import (
	"bytes"
	stdbase64 "encoding/base64"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/protocol"
	"pgregory.net/rapid"
)

// stubJobOutput is a job_output line as the stub writes it (without its newline).
func stubJobOutput(id, name string, data []byte) []byte {
	return []byte(`{"event":"job_output","id":"` + id + `","name":"` + name + `","data":"` + stdbase64.StdEncoding.EncodeToString(data) + `"}`)
}

// checkSameAsProtocol states the fast decoder's law on one line: when it decodes a line
// it gives exactly the bytes protocol.DecodeJobOutput gives, and that decoder accepts the
// line too.
func checkSameAsProtocol(t interface{ Fatalf(string, ...any) }, line []byte, id string) (ok bool) {
	var buf []byte
	got, ok := decodeJobOutput(line, id, &buf)
	if !ok {
		return false
	}
	want, err := protocol.DecodeJobOutput(line)
	if err != nil {
		t.Fatalf("fast path decoded %q, protocol refuses it: %v", line, err)
	}
	if want.ID != id || !bytes.Equal(got, want.Data) {
		t.Fatalf("fast path gave %q for id %q, protocol %q for id %q", got, id, want.Data, want.ID)
	}
	return true
}

func TestFastJobOutputDecodesTheStubsFrames(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		data := rapid.SliceOfN(rapid.Byte(), 0, 1<<12).Draw(t, "data")
		id := jobs.ID(rapid.Uint64Range(1, 1<<40).Draw(t, "id")).String()
		name := rapid.SampledFrom([]string{"stdout", "stderr"}).Draw(t, "name")
		if !checkSameAsProtocol(t, stubJobOutput(id, name, data), id) {
			t.Fatalf("fast path refused the stub's own layout")
		}
	})
}

func TestFastJobOutputFallsBackOnAnyOtherLayout(t *testing.T) {
	good := string(stubJobOutput("j1", "stdout", []byte("hi\n")))
	if !checkSameAsProtocol(t, []byte(strings.Replace(good, `aGkK`, `aGk=`, 1)), "j1") {
		t.Fatal("fast path refused other valid base64 in the stub's layout")
	}
	for _, line := range []string{
		strings.Replace(good, `"name":"stdout"`, `"name":"stdin"`, 1),
		strings.Replace(good, `aGkK`, `aGkK\n`, 1),
		strings.Replace(good, `aGkK`, `aG=K`, 1),
		strings.Replace(good, `aGkK`, `aGl=`, 1), // non-zero padding bits: strict refuses
		strings.Replace(good, `aGkK`, `aGk`, 1),
		strings.Replace(good, `aGkK`, "aG\rkK", 1), // base64 skips CR; JSON refuses it raw (found by FuzzFastJobOutput)
		strings.Replace(good, `"}`, `","data":"AAAA"}`, 1),
		strings.Replace(good, `{"event"`, `{ "event"`, 1),
		strings.Replace(good, `"id":"j1"`, `"id":"j\u0031"`, 1),
		strings.Replace(good, `"name":"stdout",`, `"name":"stdout","x":1,`, 1),
		good + " ",
	} {
		if checkSameAsProtocol(t, []byte(line), "j1") {
			t.Errorf("fast path took %s", line)
		}
	}
	if _, ok := decodeJobOutput([]byte(good), "j2", new([]byte)); ok {
		t.Error("fast path decoded a frame of another id")
	}
	if _, ok := decodeJobOutput([]byte(strings.ReplaceAll(good, "j1", `j"1`)), `j"1`, new([]byte)); ok {
		t.Error("fast path took an id that needs escaping")
	}
}

// FuzzFastJobOutput holds the fast decoder to protocol.DecodeJobOutput on any line.
func FuzzFastJobOutput(f *testing.F) {
	f.Add(stubJobOutput("j1", "stdout", []byte("hello\n")), "j1")
	f.Add(stubJobOutput("j7", "stderr", []byte{0, 0xff, 0xc3}), "j7")
	f.Add(stubJobOutput("j1", "stdout", nil), "j1")
	f.Add([]byte(`{"event":"job_output","id":"j1","name":"stdout","data":"aGk="}`), "j1")
	f.Add([]byte(`{"event":"job_output","id":"j1","name":"stdout","data":"a\"Gk="}`), "j1")
	f.Fuzz(func(t *testing.T, line []byte, id string) {
		checkSameAsProtocol(t, line, id)
	})
}

// TestCheckJobGroupAcceptsOnlyAChildLeadingItsGroup starts real children: one that leads
// its own group is accepted for its parent only; one in this process's group never is.
func TestCheckJobGroupAcceptsOnlyAChildLeadingItsGroup(t *testing.T) {
	leader := startSleeper(t, true)
	member := startSleeper(t, false)
	me := os.Getpid()
	if err := checkJobGroup(leader, leader, me); err != nil {
		t.Fatalf("a child leading its group: %v", err)
	}
	for _, tc := range []struct{ pid, pgid, kernel int }{
		{leader, leader, me + 1},        // not the kernel's child
		{member, member, me},            // does not lead a group
		{member, syscall.Getpgrp(), me}, // pid != pgid: this process's own group
		{1, 1, 0},                       // init
		{leader, leader + 1, me},        // pid != pgid
		{1 << 30, 1 << 30, me},          // no such process
	} {
		if err := checkJobGroup(tc.pid, tc.pgid, tc.kernel); err == nil {
			t.Errorf("checkJobGroup(%d, %d, %d) accepted", tc.pid, tc.pgid, tc.kernel)
		}
	}
	if !groupAlive(leader) {
		t.Fatal("a live group is not alive")
	}
	if err := syscall.Kill(-leader, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Killed but not reaped: a group of zombies is not alive.
	for deadline := time.Now().Add(10 * time.Second); groupAlive(leader); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a killed group stays alive")
		}
	}
}

// startSleeper starts `sleep 1000`, in its own process group when lead is set; it is
// killed and reaped at cleanup.
func startSleeper(t *testing.T, lead bool) int {
	t.Helper()
	cmd := exec.Command("sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: lead}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd.Process.Pid
}

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
