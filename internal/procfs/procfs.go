// Package procfs reads what kennel needs of Linux's /proc/<pid>/stat: a process's state,
// parent, process group and start time. Pid and start time together name a process
// across pid reuse.
//
// The command name in a stat line (field 2) is chosen by the process itself and may hold
// spaces, parentheses and newlines, so the fields after it are found from the last ')':
// a hostile name cannot shift them.
package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// ErrStat reports a /proc/<pid>/stat line that does not parse.
var ErrStat = errors.New("bad /proc stat line")

// Stat is the part of /proc/<pid>/stat kennel uses.
type Stat struct {
	PID   int
	State byte // 'R', 'S', 'D', 'Z' (zombie), 'T', ...
	PPID  int
	PGRP  int
	// Start is the process's start time in clock ticks since boot.
	Start uint64
}

// Zombie reports whether the process has ended and waits to be reaped.
func (s Stat) Zombie() bool { return s.State == 'Z' }

// Parse parses a /proc/<pid>/stat line. Errors match ErrStat.
func Parse(b []byte) (Stat, error) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return Stat{}, fmt.Errorf("parse stat: no command: %w", ErrStat)
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil || pid < 0 {
		return Stat{}, fmt.Errorf("parse stat: pid: %w", ErrStat)
	}
	// Fields from 3 on: state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
	// cmajflt utime stime cutime cstime priority nice num_threads itrealvalue starttime ...
	f := bytes.Fields(b[end+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("parse stat: fields: %w", ErrStat)
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgrp, err2 := strconv.Atoi(string(f[2]))
	start, err3 := strconv.ParseUint(string(f[19]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || ppid < 0 {
		return Stat{}, fmt.Errorf("parse stat: numbers: %w", ErrStat)
	}
	return Stat{PID: pid, State: f[0][0], PPID: ppid, PGRP: pgrp, Start: start}, nil
}

// Read reads /proc/<pid>/stat. A process that is gone gives an error that matches
// fs.ErrNotExist (or ESRCH).
func Read(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	return Parse(b)
}

// All returns the stat of every process /proc lists. Processes that end during the walk,
// and stat lines that cannot be read or do not parse, are left out; only a /proc that
// cannot be listed is an error.
func All() ([]Stat, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	out := make([]Stat, 0, len(names))
	for _, name := range names {
		if name == "" || name[0] < '0' || name[0] > '9' {
			continue
		}
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if st, err := Read(pid); err == nil {
			out = append(out, st)
		}
	}
	return out, nil
}
