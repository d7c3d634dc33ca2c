package local

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/internal/procfs"
	"github.com/kennel-dev/kennel/transports"
)

// A local kernel's pids are host pids: the controller may verify, probe and kill its
// jobs' process groups itself.
var _ transports.HostGroups = (*kernel)(nil)

// VerifyGroup checks a job_start's pid and pgid against /proc: the job's process must lead
// its own group (pid == pgid > 1, as the stub starts it) and be a child of the kernel's
// Python process. Errors match fs.ErrNotExist when the process is gone, and
// errdefs.ErrInvalidArgument when it is no group of this kernel's jobs.
func (k *kernel) VerifyGroup(pid, pgid int) error {
	return verifyGroup(pid, pgid, k.info.PID)
}

// GroupAlive reports whether group pgid has a member that is not a zombie, from kill(2)
// with signal 0 and a walk of /proc. Once the kernel has ended (its reaper reaped, which
// happens only when everything the kernel started is gone) it is false without a look. An
// error (a /proc that cannot be listed) comes with alive true.
func (k *kernel) GroupAlive(pgid int) (bool, error) {
	if err := checkPGID("probe", pgid); err != nil {
		return false, err
	}
	if ended(k.watch) {
		return false, nil
	}
	return groupAlive(pgid)
}

// KillGroup sends SIGKILL to process group pgid. Once the kernel has ended it signals
// nothing and returns an error matching os.ErrProcessDone: the id may no longer be the
// job's.
func (k *kernel) KillGroup(pgid int) error {
	return killGroup(pgid, k.watch, fmt.Sprintf("local kernel %d", k.info.PID))
}

// killGroup is KillGroup of the kernel named what, watched by w: SIGKILL to group pgid
// while the kernel has not ended.
func killGroup(pgid int, w *transports.Watch, what string) error {
	if err := checkPGID("kill", pgid); err != nil {
		return err
	}
	if ended(w) {
		return fmt.Errorf("kill process group %d: %s ended: %w", pgid, what, os.ErrProcessDone)
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill process group %d: %w", pgid, err)
	}
	return nil
}

// ended reports whether w's kernel has ended (a local kernel's reaper reaped: everything
// it started is gone).
func ended(w *transports.Watch) bool {
	select {
	case <-w.Ended():
		return true
	default:
		return false
	}
}

// checkPGID refuses a group id that names no job's group: kill(2) takes -1 for every
// process and 0 for the caller's own group.
func checkPGID(op string, pgid int) error {
	if pgid <= 1 {
		return fmt.Errorf("%s process group %d: not a job's group: %w", op, pgid, errdefs.ErrInvalidArgument)
	}
	return nil
}

// verifyGroup is VerifyGroup for a kernel of pid kernelPID.
func verifyGroup(pid, pgid, kernelPID int) error {
	if pid != pgid || pgid <= 1 {
		return fmt.Errorf("verify job group: pid %d, pgid %d: the job does not lead its own group: %w", pid, pgid, errdefs.ErrInvalidArgument)
	}
	st, err := procfs.Read(pid)
	if err != nil {
		return fmt.Errorf("verify job group: pid %d: %w", pid, err)
	}
	if st.PGRP != pgid || st.PPID != kernelPID {
		return fmt.Errorf("verify job group: pid %d has group %d and parent %d, want %d and the kernel %d: %w", pid, st.PGRP, st.PPID, pgid, kernelPID, errdefs.ErrInvalidArgument)
	}
	return nil
}

// groupAlive reports whether process group pgid has a member that is not a zombie.
func groupAlive(pgid int) (bool, error) {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false, nil
	}
	all, err := procfs.All()
	if err != nil {
		return true, fmt.Errorf("probe process group %d: %w", pgid, err)
	}
	for _, st := range all {
		if st.PGRP == pgid && !st.Zombie() && st.State != 'X' {
			return true, nil
		}
	}
	return false, nil
}
