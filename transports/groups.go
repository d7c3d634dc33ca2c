package transports

import "syscall"

// HostGroups is an optional capability of a Kernel whose pids are host pids
// (Info.HostPIDs): the caller may verify, probe and kill, on the host itself, the process
// group of a shell job the kernel started, so that a killed job still dies when its kernel
// is wedged. A caller finds it with GroupsOf; a kernel without it leaves its jobs' groups
// to the kernel alone.
//
// The group ids passed in are untrusted: they come from the kernel's job_start frames.
// VerifyGroup is the check that a group is one of the kernel's jobs; GroupAlive and
// KillGroup refuse a pgid <= 1 (which would name every process or the caller's own group)
// and, once the kernel has ended, touch nothing (its groups are gone with it).
//
// Race: once every process of a group is gone, a new process may get the same id (after
// the pid space wraps). A caller therefore signals a group only while the job it verified
// has not ended, and only when GroupAlive found a live member just before.
//
// The methods do not block on the kernel and are safe for concurrent use.
type HostGroups interface {
	// VerifyGroup checks a job's pid and pgid, as its kernel reported them, before
	// anything signals that group: the process must lead its own group (pid == pgid > 1)
	// and be a child of the kernel's process, so a kernel cannot name a group it did not
	// start. The error says why not; it matches fs.ErrNotExist when the process is gone.
	VerifyGroup(pid, pgid int) error
	// GroupAlive reports whether group pgid has a member that is not a zombie. An error
	// means it cannot tell; alive is then true, so a caller that ignores the error takes
	// the group for alive.
	GroupAlive(pgid int) (alive bool, err error)
	// KillGroup sends KillSignal to every process of group pgid. A nil error says the
	// signal was sent, not that the group is gone (GroupAlive says that).
	KillGroup(pgid int) error
}

// KillSignal is the signal number HostGroups.KillGroup sends (SIGKILL), as the end of a
// job it killed records it.
const KillSignal = int(syscall.SIGKILL)

// GroupsOf returns k's HostGroups when k implements it and its pids are host pids
// (Info.HostPIDs), else nil.
func GroupsOf(k Kernel) HostGroups {
	g, ok := k.(HostGroups)
	if !ok || !k.Info().HostPIDs {
		return nil
	}
	return g
}
