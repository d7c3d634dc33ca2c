package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/internal/fakekernel"
	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/protocol"
)

// deafArgv is --transport-argv for a fake kernel that says hello, then never reads its
// stdin and ignores SIGINT, SIGTERM and SIGHUP.
func deafArgv(t *testing.T) string {
	t.Helper()
	b, err := images.Stub()
	if err != nil {
		t.Fatal(err)
	}
	argv, err := json.Marshal(fakekernel.Prefix("deaf", "", b.Hash()))
	if err != nil {
		t.Fatal(err)
	}
	return string(argv)
}

// TestASignalAlwaysEndsRun: `kennel run` sending a 1 MiB cell to a kernel that never reads
// and ignores signals ends on SIGINT (130) and on SIGTERM (143): interrupt, then the kill
// after the grace; a second SIGINT kills at once. The kernel is gone afterwards.
func TestASignalAlwaysEndsRun(t *testing.T) {
	cell := filepath.Join(t.TempDir(), "big.py")
	if err := os.WriteFile(cell, []byte("x = '"+strings.Repeat("a", 1<<20)+"'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		signals []syscall.Signal
		code    int
		within  time.Duration
	}{
		{"SIGINT", []syscall.Signal{syscall.SIGINT}, 130, 30 * time.Second},
		{"SIGTERM", []syscall.Signal{syscall.SIGTERM}, 143, 30 * time.Second},
		{"SIGINT twice", []syscall.Signal{syscall.SIGINT, syscall.SIGINT}, 130, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := kennelCmd(t, t.TempDir(), "run", "--debug", "--transport-argv", deafArgv(t), cell)
			var errb bytes.Buffer
			cmd.Stderr = &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pid := waitForFake(t, cmd.Process.Pid, &errb)
			for i, sig := range tc.signals {
				if i > 0 {
					time.Sleep(300 * time.Millisecond)
				}
				if err := cmd.Process.Signal(sig); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(tc.within):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("kennel run did not end within %v of %v; stderr:\n%s", tc.within, tc.signals, errb.String())
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tc.code {
				t.Fatalf("exit %v, want %d; stderr:\n%s", err, tc.code, errb.String())
			}
			t.Logf("ended %v after the signal, exit %d", time.Since(start).Round(time.Millisecond), ee.ExitCode())
			if err := testproc.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				_ = testproc.Kill(pid, syscall.SIGKILL)
				t.Fatalf("the fake kernel %d outlived kennel run", pid)
			}
		})
	}
}

// waitForFake waits for the fake kernel, a descendant of kennel's pid, and returns its pid.
func waitForFake(t *testing.T, kennel int, stderr *bytes.Buffer) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			var pid int
			if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
				continue
			}
			env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			if err == nil && bytes.Contains(env, []byte("KENNEL_FAKE_KERNEL=deaf")) && isDescendant(pid, kennel) {
				time.Sleep(500 * time.Millisecond) // let the cell's frame go out
				return pid
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no fake kernel under kennel %d; stderr:\n%s", kennel, stderr.String())
	return 0
}

func isDescendant(pid, ancestor int) bool {
	for range 64 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		var ppid int
		if len(fields) < 2 {
			return false
		}
		fmt.Sscan(fields[1], &ppid)
		if ppid == ancestor {
			return true
		}
		if ppid <= 1 {
			return false
		}
		pid = ppid
	}
	return false
}

// TestACellOverTheFrameLimitFailsRun: `kennel run big.py` with a 40 MiB cell fails at once
// naming the frame limit (it used to hang after the kernel dropped the frame).
func TestACellOverTheFrameLimitFailsRun(t *testing.T) {
	cell := filepath.Join(t.TempDir(), "big.py")
	if err := os.WriteFile(cell, []byte("# "+strings.Repeat("x", 40<<20)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := kennelCmd(t, t.TempDir(), "run", cell)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(errb.String(), fmt.Sprint(protocol.MaxLine)) || !strings.Contains(errb.String(), "limit") {
			t.Fatalf("exit %v, stderr %q", err, errb.String())
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("kennel run of a 40 MiB cell did not end; stderr %q", errb.String())
	}
}
