package transporttest

import (
	"strconv"

	"github.com/kennel-dev/kennel/internal/procfs"
)

// proc names a host process across pid reuse: its pid and start time.
type proc struct {
	pid   int
	start string
}

// stat reads a process's state, parent and start time from /proc ("" when gone).
func stat(pid int) (state string, ppid int, start string) {
	st, err := procfs.Read(pid)
	if err != nil {
		return "", 0, ""
	}
	return string(st.State), st.PPID, strconv.FormatUint(st.Start, 10)
}

// identify records a live process; ok is false when it is not alive.
func identify(pid int) (proc, bool) {
	state, _, start := stat(pid)
	if start == "" || state == "Z" {
		return proc{}, false
	}
	return proc{pid: pid, start: start}, true
}

// alive reports whether p still exists, not reaped (a zombie counts).
func (p proc) alive() bool {
	_, _, start := stat(p.pid)
	return start == p.start
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
			out[proc{pid: st.PID, start: strconv.FormatUint(st.Start, 10)}] = true
		}
	}
	return out
}
