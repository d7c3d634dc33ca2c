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
	if err := check("process", pid, syscall.Getpid(), "the test itself"); err != nil {
		return err
	}
	return syscall.Kill(pid, sig)
}

// KillGroup sends sig to every process of group pgid. It refuses (ErrInvalidArgument,
// nothing signalled) a group id of 1 or less and the test process's own group; otherwise
// it returns kill(2)'s error (syscall.ESRCH for a group with no process left).
func KillGroup(pgid int, sig syscall.Signal) error {
	if err := check("process group", pgid, syscall.Getpgrp(), "the test's own group"); err != nil {
		return err
	}
	return syscall.Kill(-pgid, sig)
}

// check refuses an id of 1 or less and own, the test's own process or group (ownWhy).
func check(what string, id, own int, ownWhy string) error {
	if id <= 1 {
		return fmt.Errorf("signal %s %d: not a process a test started: %w", what, id, errdefs.ErrInvalidArgument)
	}
	if id == own {
		return fmt.Errorf("signal %s %d: %s: %w", what, id, ownWhy, errdefs.ErrInvalidArgument)
	}
	return nil
}
