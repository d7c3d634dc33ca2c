package transporttest

import (
	"bytes"
	"os"
	"strconv"
)

// proc names a host process across pid reuse: its pid and start time.
type proc struct {
	pid   int
	start string
}

// stat reads a process's state, parent and start time from /proc ("" when gone).
func stat(pid int) (state string, ppid int, start string) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, ""
	}
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return "", 0, ""
	}
	f := bytes.Fields(b[end+1:])
	if len(f) < 20 {
		return "", 0, ""
	}
	ppid, _ = strconv.Atoi(string(f[1]))
	return string(f[0]), ppid, string(f[19])
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
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, ppid, start := stat(n); ppid == pid && start != "" {
			out[proc{pid: n, start: start}] = true
		}
	}
	return out
}
