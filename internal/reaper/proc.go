package reaper

import (
	"fmt"
	"os"
	"strconv"

	"github.com/kennel-dev/kennel/internal/procfs"
)

// ErrStat reports a /proc/<pid>/stat line that does not parse.
var ErrStat = procfs.ErrStat

// children lists the processes whose parent is ppid, by one walk of /proc. Processes that
// end during the walk are skipped.
func children(ppid int) ([]procfs.Stat, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, fmt.Errorf("list children of %d: %w", ppid, err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list children of %d: %w", ppid, err)
	}
	var out []procfs.Stat
	for _, name := range names {
		if name == "" || name[0] < '0' || name[0] > '9' {
			continue
		}
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		st, err := procfs.Read(pid)
		if err != nil {
			continue // gone, or a kernel thread we cannot read: not ours either way
		}
		if st.PPID == ppid {
			out = append(out, st)
		}
	}
	return out, nil
}
