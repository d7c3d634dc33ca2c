package reaper

import (
	"os"
	"os/exec"
	"slices"
	"testing"

	"github.com/kennel-dev/kennel/internal/procfs"
)

func TestChildrenListsARealChild(t *testing.T) {
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	kids, err := children(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(kids, func(s procfs.Stat) bool { return s.PID == cmd.Process.Pid }) {
		t.Fatalf("children(%d) = %+v, missing sleep %d", os.Getpid(), kids, cmd.Process.Pid)
	}
}
