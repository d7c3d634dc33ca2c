package reaper

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// ErrStat reports a /proc/<pid>/stat line that does not parse.
var ErrStat = errors.New("bad /proc stat line")

// procStat is the part of /proc/<pid>/stat the reaper needs.
type procStat struct {
	pid   int
	state byte
	ppid  int
	pgrp  int
	// start is the process's start time in clock ticks since boot: with pid, it names a
	// process across pid reuse.
	start uint64
}

// parseStat parses a /proc/<pid>/stat line. The command name (field 2) is chosen by the
// process itself and may hold spaces, parentheses and newlines, so the fields after it are
// found from the last ')'.
func parseStat(b []byte) (procStat, error) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return procStat{}, fmt.Errorf("parse stat: no command: %w", ErrStat)
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil || pid < 0 {
		return procStat{}, fmt.Errorf("parse stat: pid: %w", ErrStat)
	}
	// Fields from 3 on: state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
	// cmajflt utime stime cutime cstime priority nice num_threads itrealvalue starttime ...
	f := bytes.Fields(b[end+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("parse stat: fields: %w", ErrStat)
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgrp, err2 := strconv.Atoi(string(f[2]))
	start, err3 := strconv.ParseUint(string(f[19]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || ppid < 0 {
		return procStat{}, fmt.Errorf("parse stat: numbers: %w", ErrStat)
	}
	return procStat{pid: pid, state: f[0][0], ppid: ppid, pgrp: pgrp, start: start}, nil
}

// readStat reads /proc/<pid>/stat. A process that is gone gives an error that matches
// fs.ErrNotExist (or ESRCH).
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseStat(b)
}

// children lists the processes whose parent is ppid, by one walk of /proc. Processes that
// end during the walk are skipped.
func children(ppid int) ([]procStat, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, fmt.Errorf("list children of %d: %w", ppid, err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list children of %d: %w", ppid, err)
	}
	var out []procStat
	for _, name := range names {
		if name == "" || name[0] < '0' || name[0] > '9' {
			continue
		}
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		st, err := readStat(pid)
		if err != nil {
			continue // gone, or a kernel thread we cannot read: not ours either way
		}
		if st.ppid == ppid {
			out = append(out, st)
		}
	}
	return out, nil
}
