package controller_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/internal/procfs"
	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/jobs"
)

// groupMembers lists the processes of group pgid, zombies included, from /proc.
func groupMembers(t *testing.T, pgid int) []int {
	t.Helper()
	all, err := procfs.All()
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, st := range all {
		if st.PGRP == pgid {
			pids = append(pids, st.PID)
		}
	}
	return pids
}

func waitGroupSize(t *testing.T, pgid, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if len(groupMembers(t, pgid)) >= n {
			return
		}
	}
	t.Fatalf("group %d has %v, want %d processes", pgid, groupMembers(t, pgid), n)
}

// waitGroupGone waits until no process of group pgid remains, not even a zombie.
func waitGroupGone(t *testing.T, pgid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if len(groupMembers(t, pgid)) == 0 {
			return
		}
	}
	t.Fatalf("processes of group %d remain: %v", pgid, groupMembers(t, pgid))
}

// TestKillingAJobThatClosedItsOutputKillsItsWholeGroup kills a job whose processes closed
// stdout and stderr: every process of its group is gone, and it ends once.
func TestKillingAJobThatClosedItsOutputKillsItsWholeGroup(t *testing.T) {
	s := startJobSession(t, controller.Options{})
	j := runJob(t, s, "exec >&- 2>&-; sleep 1000 & exec sleep 1000", controller.JobOptions{})
	pgid := waitPID(t, j)
	waitGroupSize(t, pgid, 2)
	if w, _ := s.WaitJob(context.Background(), j.ID(), 200*time.Millisecond); w.Outcome == nil {
		t.Fatal("no outcome")
	} else if _, ok := w.Outcome.(jobs.Detached); !ok {
		t.Fatalf("a sleeping job settled: %#v", w.Outcome)
	}
	if err := s.KillJob(context.Background(), j.ID()); err != nil {
		t.Fatal(err)
	}
	st, w := settle(t, s, j.ID(), 30*time.Second)
	if st.End.Signal != int(syscall.SIGTERM) || !st.End.Killed || w.Err != nil {
		t.Fatalf("end %v, err %v; want SIGTERM, killed", st.End, w.Err)
	}
	waitGroupGone(t, pgid)
	time.Sleep(100 * time.Millisecond) // a second end, were there one, would be in by now
	if l := j.Late(); l.Ends != 0 {
		t.Fatalf("second end: %+v", l)
	}
	if o := s.Jobs().Observe(); o.LiveJobCount != 0 {
		t.Fatalf("live jobs after the kill: %+v", o)
	}
}

// TestAWedgedKernelsJobIsKilledByTheController stops the kernel (SIGSTOP) so it cannot
// act on the kill: the controller kills the job's group itself and ends the job.
func TestAWedgedKernelsJobIsKilledByTheController(t *testing.T) {
	s := startJobSession(t, controller.Options{JobKillGrace: 200 * time.Millisecond})
	_, info, _ := s.Kernel()
	j := runJob(t, s, "exec sleep 1000", controller.JobOptions{})
	pgid := waitPID(t, j)
	if err := testproc.Kill(info.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = testproc.Kill(info.PID, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	if err := s.KillJob(context.Background(), j.ID()); err != nil {
		t.Fatal(err)
	}
	st, w := settle(t, s, j.ID(), 30*time.Second)
	if !errors.Is(w.Err, controller.ErrEndedByController) || st.End.Signal != int(syscall.SIGKILL) || !st.End.Killed {
		t.Fatalf("end %v, err %v; want SIGKILL, killed, ErrEndedByController", st.End, w.Err)
	}
	for _, pid := range groupMembers(t, pgid) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); !strings.Contains(string(b), ") Z ") {
			t.Fatalf("process %d of the group is alive: %s", pid, b)
		}
	}
	resume()
	waitGroupGone(t, pgid)
	// The kernel's own job_end arrives late and is ignored.
	for deadline := time.Now().Add(10 * time.Second); j.Late().Ends == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the kernel's job_end never arrived")
		}
	}
	if end, _ := j.End(); end.Signal != int(syscall.SIGKILL) {
		t.Fatalf("the late end replaced the first: %v", end)
	}
}

func TestAJobEndsWhenItsKernelEnds(t *testing.T) {
	s := startJobSession(t, controller.Options{})
	_, info, _ := s.Kernel()
	j := runJob(t, s, "exec sleep 1000", controller.JobOptions{})
	pgid := waitPID(t, j)
	if err := testproc.Kill(info.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st, w := settle(t, s, j.ID(), 30*time.Second)
	if !errors.Is(w.Err, controller.ErrKernelExited) || st.End.ExitCode != nil || st.End.Signal != 0 {
		t.Fatalf("end %v, err %v; want unknown, ErrKernelExited", st.End, w.Err)
	}
	waitGroupGone(t, pgid) // the transport ends what its kernel started

	// The next job runs in a fresh kernel; closing the session ends it.
	j2 := runJob(t, s, "exec sleep 1000", controller.JobOptions{})
	waitPID(t, j2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, w := settle(t, s, j2.ID(), 10*time.Second); !errors.Is(w.Err, controller.ErrClosed) {
		t.Fatalf("job of a closed session: %v, want ErrClosed", w.Err)
	}
	if _, err := s.RunJob(ctx, "true", controller.JobOptions{}); !errors.Is(err, controller.ErrClosed) {
		t.Fatalf("RunJob after Close: %v, want ErrClosed", err)
	}
}
