package reaper

import (
	"fmt"

	"github.com/kennel-dev/kennel/internal/procfs"
)

// children lists the processes whose parent is ppid, by one walk of /proc. Processes that
// end during the walk are skipped.
func children(ppid int) ([]procfs.Stat, error) {
	all, err := procfs.All()
	if err != nil {
		return nil, fmt.Errorf("list children of %d: %w", ppid, err)
	}
	var out []procfs.Stat
	for _, st := range all {
		if st.PPID == ppid {
			out = append(out, st)
		}
	}
	return out, nil
}
