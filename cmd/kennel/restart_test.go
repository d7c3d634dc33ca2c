package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/internal/testneed"
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

// TestADaemonOfAnotherBuildResumesAndUpgradesTheKernels: kernels started by one build of
// kennel serve, the daemon restarted as a build with another bundle hash (a salted
// build, -ldflags -X images.buildSalt): the session is resumed with its kernel stale, and
// its next cell first swaps the kernel for one of the new build, the namespace's values
// carried over.
func TestADaemonOfAnotherBuildResumesAndUpgradesTheKernels(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		testneed.Missing(t, "the go command (to build another kennel)", err)
	}
	other := filepath.Join(t.TempDir(), "kennel-other")
	build := exec.Command("go", "build", "-o", other, "-ldflags", "-X github.com/kennel-dev/kennel/images.buildSalt=upgrade-test", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of a salted kennel: %v\n%s", err, out)
	}
	base, err := os.MkdirTemp("", "kt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	sock := filepath.Join(base, "run", "kennel.sock")
	state := filepath.Join(base, "state")
	global := filepath.Join(base, "config")
	serve := func(binary string) *exec.Cmd {
		cmd := kennelCmd(t, t.TempDir(), "serve", "--socket", sock, "--state", state)
		if binary != "" {
			cmd.Path, cmd.Args[0] = binary, binary
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		t.Cleanup(func() { _ = testproc.Kill(cmd.Process.Pid, syscall.SIGTERM); <-done })
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, _, code := runWith(t, t.TempDir(), global, nil, "ps", "--socket", sock); code == 0 {
				return cmd
			}
			if time.Now().After(deadline) {
				t.Fatal("kennel serve did not answer within 20 s")
			}
		}
	}
	stop := func(cmd *exec.Cmd) {
		if err := testproc.Kill(cmd.Process.Pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); testproc.Kill(cmd.Process.Pid, 0) == nil && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
	}
	first := serve("")
	out, errOut, code := runWith(t, t.TempDir(), global, nil, "create", "--socket", sock, "--local", "-C", t.TempDir())
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("create: exit %d, %q, %q", code, out, errOut)
	}
	if out, errOut, code = runWith(t, t.TempDir(), global, nil, "exec", "--socket", sock, id, "-c", "x = 41"); code != 0 {
		t.Fatalf("exec: exit %d, %q, %q", code, out, errOut)
	}
	before := sessionsOf(t, sock, global)[0].Kernel
	stop(first)
	serve(other)
	// The resumed kernel is stale until its next cell.
	var k api.Kernel
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		k = sessionsOf(t, sock, global)[0].Kernel
		if k.State != nil && *k.State == "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session's kernel was not resumed: %+v", k)
		}
	}
	if k.Stale == nil || !*k.Stale || k.Build == nil || *k.Build != *before.Build || *k.PID != *before.PID {
		t.Fatalf("after the restart as another build: kernel %+v, want the old kernel (pid %d, build %.8s), stale", k, *before.PID, *before.Build)
	}
	out, errOut, code = runWith(t, t.TempDir(), global, nil, "exec", "--socket", sock, id, "-c", "x + 1")
	if code != 0 || strings.TrimSpace(out) != "42" {
		t.Fatalf("x + 1 after the upgrade: exit %d, stdout %q, stderr %q; want 42 (x carried over)", code, out, errOut)
	}
	if !strings.Contains(errOut, "was replaced by one of the daemon's build") || !strings.Contains(errOut, "carried over: ") || !strings.Contains(errOut, "x") {
		t.Fatalf("the cell's notice of the upgrade: stderr %q", errOut)
	}
	k = sessionsOf(t, sock, global)[0].Kernel
	if k.Stale == nil || *k.Stale || *k.Build == *before.Build || *k.PID == *before.PID {
		t.Fatalf("after the upgrade: kernel %+v, want a new kernel of the new build", k)
	}
}
