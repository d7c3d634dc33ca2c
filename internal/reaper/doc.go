// Package reaper runs a kernel under a tiny child-subreaper process, so that nothing the
// kernel or its cells start survives the kernel's end.
//
// The reaper is the current executable re-executed in reaper mode. A program that starts
// reaper processes (cmd/kennel, and every test binary that starts local kernels) must call
// Main first thing in main (or TestMain):
//
//	func main() {
//		if reaper.Main() {
//			return // never reached: in reaper mode Main exits the process
//		}
//		...
//	}
//
// Main returns false when the process is not a reaper. In reaper mode it never returns: it
// runs the kernel and ends the process with os.Exit.
//
// # What the reaper does
//
// The launcher side (Start) re-executes the binary with a marker variable and a guard
// argument, with the kernel's stdin, stdout and stderr as the reaper's own (the reaper passes
// the very same descriptors to the kernel: no copying on the frame path) and a status pipe
// as descriptor 3. The reaper process:
//
//   - marks itself a child subreaper (PR_SET_CHILD_SUBREAPER), so every orphaned descendant
//     of the kernel (a double fork, a setsid'd grandchild) is reparented to it;
//   - carries PR_SET_PDEATHSIG = SIGTERM, set between fork and exec on its main thread, so the
//     death of the controller thread that started it ends it; the launcher keeps that thread
//     alive (runtime.LockOSThread) until the reaper is reaped;
//   - starts the kernel in its own process group, with the reaper's environment minus the
//     marker, and reports the kernel's pid on the status pipe (or the errno of a failed exec);
//   - reaps every child, so orphans never pile up as zombies;
//   - on SIGTERM, SIGINT or SIGHUP forwards SIGTERM to the kernel's process group and, after
//     its grace, kills hard; on SIGUSR1 kills hard at once;
//   - once the kernel has exited (or on a hard kill) kills every remaining descendant: it
//     walks /proc for its own children, SIGKILLs each one and its process group, reaps, and
//     repeats until it has no child left;
//   - reports the kernel's exit status (code, or the signal that ended it) on the status
//     pipe and exits with the kernel's code, or 128+signal.
//
// # Limits
//
// A process that leaves the subtree by other means than reparenting (asking another daemon
// to start it: systemd-run, at, a container engine) is out of the reaper's reach. A process
// stuck in uninterruptible sleep delays the reaper's exit until it dies. The reaper runs as
// the kernel's user: it is a lifetime guard, not a security boundary.
package reaper
