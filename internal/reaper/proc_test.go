package reaper

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

func TestParseStatHostileComm(t *testing.T) {
	for _, comm := range []string{"sleep", "a b", "x) S 1 1 1", ")(", "((", "))", "a\nb", "", " ) 5 5 5 5"} {
		line := fmt.Sprintf("123 (%s) S 45 67 67 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 998877 1000 100", comm)
		st, err := parseStat([]byte(line))
		if err != nil {
			t.Fatalf("comm %q: %v", comm, err)
		}
		want := procStat{pid: 123, state: 'S', ppid: 45, pgrp: 67, start: 998877}
		if st != want {
			t.Fatalf("comm %q: got %+v, want %+v", comm, st, want)
		}
	}
}

func TestParseStatGenerated(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		want := procStat{
			pid:   rapid.IntRange(1, 1<<22).Draw(t, "pid"),
			state: rapid.SampledFrom([]byte("RSDZTtXI")).Draw(t, "state"),
			ppid:  rapid.IntRange(0, 1<<22).Draw(t, "ppid"),
			pgrp:  rapid.IntRange(0, 1<<22).Draw(t, "pgrp"),
			start: rapid.Uint64().Draw(t, "start"),
		}
		comm := rapid.StringN(0, 16, 64).Draw(t, "comm")
		line := fmt.Sprintf("%d (%s) %c %d %d 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n",
			want.pid, comm, want.state, want.ppid, want.pgrp, want.start)
		got, err := parseStat([]byte(line))
		if err != nil || got != want {
			t.Fatalf("line %q: got %+v, %v; want %+v", line, got, err, want)
		}
	})
}

func TestParseStatRefusesMalformed(t *testing.T) {
	for _, s := range []string{"", "123", "123 (x", "(x) S 1 1", "x (y) S 1 1 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0",
		"1 (y) S 1 1", "1 (y) SS 1 1 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0", "1 (y) S -1 1 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0"} {
		if _, err := parseStat([]byte(s)); !errors.Is(err, ErrStat) {
			t.Errorf("parseStat(%q) = %v, want ErrStat", s, err)
		}
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("1 (init) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0"))
	f.Add([]byte("77 (a) b) (c) R 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0 0"))
	f.Add([]byte("()"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseStat(b)
		if err != nil {
			if !errors.Is(err, ErrStat) {
				t.Fatalf("error %v is not ErrStat", err)
			}
			return
		}
		if st.pid < 0 || st.ppid < 0 {
			t.Fatalf("negative pid accepted: %+v", st)
		}
	})
}

func TestChildrenListsARealChild(t *testing.T) {
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	kids, err := children(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(kids, func(s procStat) bool { return s.pid == cmd.Process.Pid }) {
		t.Fatalf("children(%d) = %+v, missing sleep %d", os.Getpid(), kids, cmd.Process.Pid)
	}
	self, err := readStat(os.Getpid())
	if err != nil || self.pid != os.Getpid() || self.ppid != os.Getppid() {
		t.Fatalf("readStat(self) = %+v, %v", self, err)
	}
}
