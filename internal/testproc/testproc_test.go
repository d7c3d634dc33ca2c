package testproc

import (
	"errors"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
)

// TestRefusesWhatKillReadsAsMany: 0, 1, -1, the test itself and its own group are
// refused and signal nothing (this test process is still here to check).
func TestRefusesWhatKillReadsAsMany(t *testing.T) {
	for _, id := range []int{0, 1, -1, -syscall.Getpid()} {
		if err := Kill(id, syscall.SIGKILL); !errdefs.IsInvalidArgument(err) {
			t.Errorf("Kill(%d) = %v, want invalid argument", id, err)
		}
		if err := KillGroup(id, syscall.SIGKILL); !errdefs.IsInvalidArgument(err) {
			t.Errorf("KillGroup(%d) = %v, want invalid argument", id, err)
		}
	}
	if err := Kill(syscall.Getpid(), syscall.SIGKILL); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Kill(self) = %v", err)
	}
	if err := KillGroup(syscall.Getpgrp(), syscall.SIGKILL); !errdefs.IsInvalidArgument(err) {
		t.Errorf("KillGroup(own group) = %v", err)
	}
}

// TestSignalsAChildAndItsGroup: a child in a group of its own is signalled, then gone.
func TestSignalsAChildAndItsGroup(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Skipf("sleep: %v", err)
	}
	pid := cmd.Process.Pid
	if err := Kill(pid, 0); err != nil {
		t.Fatalf("probe a live child: %v", err)
	}
	if err := KillGroup(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill its group: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the child outlived its group's SIGKILL")
	}
	if err := KillGroup(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("probe a gone group = %v, want ESRCH", err)
	}
}
