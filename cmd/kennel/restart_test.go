package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/testproc"
)

// TestASIGKILLedDaemonLosesNoSession: `kennel serve` SIGKILLed (no shutdown at all) and
// started again on the same state directory serves the session it had, with its kernel's
// namespace: the kernel ran on, detached, and the store kept its record.
func TestASIGKILLedDaemonLosesNoSession(t *testing.T) {
	base, err := os.MkdirTemp("", "kt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) }) // ends the kernel (its run directory goes)
	sock := filepath.Join(base, "run", "kennel.sock")
	state := filepath.Join(base, "state")
	global := filepath.Join(base, "config")
	serve := func() *os.Process {
		cmd := kennelCmd(t, t.TempDir(), "serve", "--socket", sock, "--state", state)
		var errb syncBuf
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = cmd.Wait() }()
		t.Cleanup(func() { _ = testproc.Kill(cmd.Process.Pid, syscall.SIGTERM) })
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, _, code := runWith(t, t.TempDir(), global, nil, "ps", "--socket", sock); code == 0 {
				return cmd.Process
			}
			if time.Now().After(deadline) {
				t.Fatalf("kennel serve did not answer within 20 s; stderr:\n%s", errb.String())
			}
		}
	}
	first := serve()
	out, errOut, code := runWith(t, t.TempDir(), global, nil, "create", "--socket", sock, "--local", "-C", t.TempDir())
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("create: exit %d, %q, %q", code, out, errOut)
	}
	if out, errOut, code = runWith(t, t.TempDir(), global, nil, "exec", "--socket", sock, id, "-c", "x = 41"); code != 0 {
		t.Fatalf("exec: exit %d, %q, %q", code, out, errOut)
	}
	if err := testproc.Kill(first.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); testproc.Kill(first.Pid, 0) == nil && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	serve()
	out, errOut, code = runWith(t, t.TempDir(), global, nil, "exec", "--socket", sock, id, "-c", "x + 1")
	if code != 0 || strings.TrimSpace(out) != "42" {
		t.Fatalf("x + 1 after the SIGKILL and restart: exit %d, stdout %q, stderr %q; want 42", code, out, errOut)
	}
}
