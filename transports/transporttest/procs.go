package transporttest

import "github.com/kennel-dev/kennel/internal/procfs"

// proc names a host process across pid reuse: its pid and start time.
type proc struct {
	pid   int
	start uint64
}

// identify records a live process; ok is false when it is gone or a zombie.
func identify(pid int) (proc, bool) {
	st, err := procfs.Read(pid)
	if err != nil || st.Zombie() {
		return proc{}, false
	}
	return proc{pid: pid, start: st.Start}, true
}

// alive reports whether p still exists, not reaped (a zombie counts).
func (p proc) alive() bool {
	st, err := procfs.Read(p.pid)
	return err == nil && st.Start == p.start
}

// childrenOf lists the live processes whose parent is pid.
func childrenOf(pid int) map[proc]bool {
	out := map[proc]bool{}
	all, err := procfs.All()
	if err != nil {
		return out
	}
	for _, st := range all {
		if st.PPID == pid {
			out[proc{pid: st.PID, start: st.Start}] = true
		}
	}
	return out
}
