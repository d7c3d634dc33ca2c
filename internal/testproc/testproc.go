// Package testproc is the one way tests signal processes. kill(2) reads a pid of 0 as
// the caller's own process group and -1 (or a group of 1) as every process the caller may
// signal: a test that signals a pid it has not learnt yet (0) would SIGKILL `go test`
// and whatever CI job started it. Kill and KillGroup refuse such ids and the test
// process's own group, and signal nothing for them.
package testproc

import (
	"fmt"
	"syscall"

	"github.com/containerd/errdefs"
)

// Kill sends sig to process pid. It refuses (ErrInvalidArgument, nothing signalled) a
// pid of 1 or less and the test process itself; otherwise it returns kill(2)'s error
// (syscall.ESRCH for a process that is gone).
func Kill(pid int, sig syscall.Signal) error {
	if err := check("process", pid); err != nil {
		return err
	}
	if pid == syscall.Getpid() {
		return fmt.Errorf("signal process %d: the test itself: %w", pid, errdefs.ErrInvalidArgument)
	}
	return syscall.Kill(pid, sig)
}

// KillGroup sends sig to every process of group pgid. It refuses (ErrInvalidArgument,
// nothing signalled) a group id of 1 or less and the test process's own group; otherwise
// it returns kill(2)'s error (syscall.ESRCH for a group with no process left).
func KillGroup(pgid int, sig syscall.Signal) error {
	if err := check("process group", pgid); err != nil {
		return err
	}
	if pgid == syscall.Getpgrp() {
		return fmt.Errorf("signal process group %d: the test's own group: %w", pgid, errdefs.ErrInvalidArgument)
	}
	return syscall.Kill(-pgid, sig)
}

func check(what string, id int) error {
	if id <= 1 {
		return fmt.Errorf("signal %s %d: not a process a test started: %w", what, id, errdefs.ErrInvalidArgument)
	}
	return nil
}
