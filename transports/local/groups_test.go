package local_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/internal/procfs"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// groupsCell starts, in the kernel, a sleep leading its own group and one in the
// kernel's group, and prints their pids and the kernel's group.
const groupsCell = `import os, subprocess
_leader = subprocess.Popen(["sleep", "1000"], start_new_session=True)
_member = subprocess.Popen(["sleep", "1000"])
print(_leader.pid, _member.pid, os.getpgrp())
`

// TestHostGroupsVerifyProbeAndKillOnlyTheKernelsJobGroups runs a real kernel: a group
// its child leads is verified, probed and killed (a group of zombies is not alive); a
// group that is not led by the kernel's child, a process of another parent, a process
// that is gone and the ids kill(2) reads as "every process" or "my own group" are
// refused; once the kernel has ended nothing is signalled, not even a live group.
func TestHostGroupsVerifyProbeAndKillOnlyTheKernelsJobGroups(t *testing.T) {
	k, c := transporttest.Start(t, newTransport(t), transports.Spec{})
	g := transports.GroupsOf(k)
	if g == nil {
		t.Fatal("a local kernel has no HostGroups")
	}
	out, err := c.Run(groupsCell)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for _, f := range strings.Fields(out) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("cell printed %q", out)
		}
		ids = append(ids, n)
	}
	if len(ids) != 3 {
		t.Fatalf("cell printed %q", out)
	}
	leader, member, kernelGroup := ids[0], ids[1], ids[2]
	mine := startSleeper(t) // leads its own group, a child of this process

	if err := g.VerifyGroup(leader, leader); err != nil {
		t.Fatalf("the kernel's child leading its group: %v", err)
	}
	for _, tc := range []struct {
		pid, pgid int
		want      error
	}{
		{member, member, errdefs.ErrInvalidArgument},      // does not lead a group
		{member, kernelGroup, errdefs.ErrInvalidArgument}, // pid != pgid: the kernel's own group
		{leader, leader + 1, errdefs.ErrInvalidArgument},  // pid != pgid
		{mine, mine, errdefs.ErrInvalidArgument},          // not the kernel's child
		{1, 1, errdefs.ErrInvalidArgument},                // init
		{0, 0, errdefs.ErrInvalidArgument},
		{-1, -1, errdefs.ErrInvalidArgument},
		{1 << 30, 1 << 30, fs.ErrNotExist}, // no such process
	} {
		if err := g.VerifyGroup(tc.pid, tc.pgid); !errors.Is(err, tc.want) {
			t.Errorf("VerifyGroup(%d, %d) = %v, want %v", tc.pid, tc.pgid, err, tc.want)
		}
	}
	for _, pgid := range []int{1, 0, -1} {
		if alive, err := g.GroupAlive(pgid); alive || !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("GroupAlive(%d) = %v, %v; want a refusal", pgid, alive, err)
		}
		if err := g.KillGroup(pgid); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("KillGroup(%d) = %v; want a refusal", pgid, err)
		}
	}

	if alive, err := g.GroupAlive(leader); !alive || err != nil {
		t.Fatalf("GroupAlive(%d) of a live group = %v, %v", leader, alive, err)
	}
	if err := g.KillGroup(leader); err != nil {
		t.Fatalf("KillGroup(%d): %v", leader, err)
	}
	// Killed but not reaped by the kernel (it keeps the Popen): zombies are not alive.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		alive, err := g.GroupAlive(leader)
		if err != nil {
			t.Fatal(err)
		}
		if !alive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a killed group stays alive")
		}
	}
	if st, err := procfs.Read(member); err != nil || st.Zombie() {
		t.Fatalf("the kernel's other child was hit: %+v, %v", st, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := k.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := g.KillGroup(mine); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("KillGroup after the kernel's end = %v, want os.ErrProcessDone", err)
	}
	if alive, err := g.GroupAlive(mine); alive || err != nil {
		t.Errorf("GroupAlive after the kernel's end = %v, %v; want false", alive, err)
	}
	if st, err := procfs.Read(mine); err != nil || st.Zombie() {
		t.Fatalf("a group that is not the kernel's was killed after its end: %+v, %v", st, err)
	}
}

// startSleeper starts `sleep 1000` leading its own process group; it is killed and reaped
// at cleanup.
func startSleeper(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd.Process.Pid
}
