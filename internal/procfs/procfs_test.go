package procfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"pgregory.net/rapid"
)

// tail is the stat fields after pgrp up to and past starttime (field 22 = 4242).
const tail = "0 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 4242 1000 100"

func TestParseHostileComm(t *testing.T) {
	for _, comm := range []string{"sleep", "a b", "x) S 1 1 1", ")(", "((", "))", "a\nb", "", " ) 5 5 5 5", "a) (b) c"} {
		line := fmt.Sprintf("123 (%s) S 45 67 %s", comm, tail)
		st, err := Parse([]byte(line))
		if err != nil {
			t.Fatalf("comm %q: %v", comm, err)
		}
		want := Stat{PID: 123, State: 'S', PPID: 45, PGRP: 67, Start: 4242}
		if st != want {
			t.Fatalf("comm %q: got %+v, want %+v", comm, st, want)
		}
	}
	if st, _ := Parse([]byte("9 (z) Z 1 9 " + tail)); !st.Zombie() {
		t.Fatalf("state Z is not a zombie: %+v", st)
	}
}

func TestParseGenerated(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		want := Stat{
			PID:   rapid.IntRange(1, 1<<22).Draw(t, "pid"),
			State: rapid.SampledFrom([]byte("RSDZTtXI")).Draw(t, "state"),
			PPID:  rapid.IntRange(0, 1<<22).Draw(t, "ppid"),
			PGRP:  rapid.IntRange(0, 1<<22).Draw(t, "pgrp"),
			Start: rapid.Uint64().Draw(t, "start"),
		}
		comm := rapid.StringN(0, 16, 64).Draw(t, "comm")
		line := fmt.Sprintf("%d (%s) %c %d %d 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n",
			want.PID, comm, want.State, want.PPID, want.PGRP, want.Start)
		got, err := Parse([]byte(line))
		if err != nil || got != want {
			t.Fatalf("line %q: got %+v, %v; want %+v", line, got, err, want)
		}
	})
}

func TestParseRefusesMalformed(t *testing.T) {
	for _, s := range []string{"", "123", "123 (x", "(x) S 1 1", "x (y) S 1 1 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0",
		"1 (y) S 1 1", "1 (y) SS 1 1 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0", "1 (y) S -1 1 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0",
		"42 x S 1 2 " + tail, "42 (x) S one 2 " + tail, "42 (x) S 1 2 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 notanumber 0",
		"42 (x) S 1 2 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 -1 0"} {
		if _, err := Parse([]byte(s)); !errors.Is(err, ErrStat) {
			t.Errorf("Parse(%q) = %v, want ErrStat", s, err)
		}
	}
}

func TestReadSelf(t *testing.T) {
	self, err := Read(os.Getpid())
	if err != nil || self.PID != os.Getpid() || self.PPID != os.Getppid() || self.PGRP != syscall.Getpgrp() || self.Start == 0 {
		t.Fatalf("own stat %+v, %v", self, err)
	}
	if _, err := Read(1 << 30); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a pid that cannot exist: %v", err)
	}
}

// TestAllListsAChildAndForgetsItWhenReaped starts a child and finds it in All with its
// parent and group; once the child is reaped, All no longer lists it.
func TestAllListsAChildAndForgetsItWhenReaped(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	find := func(pid int) (Stat, bool) {
		all, err := All()
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range all {
			if st.PID == pid {
				return st, true
			}
		}
		return Stat{}, false
	}
	st, ok := find(cmd.Process.Pid)
	if !ok || st.PPID != os.Getpid() || st.PGRP != syscall.Getpgrp() {
		t.Fatalf("child %d: %+v, listed %v", cmd.Process.Pid, st, ok)
	}
	if self, ok := find(os.Getpid()); !ok || self.PPID != os.Getppid() {
		t.Fatalf("self: %+v, listed %v", self, ok)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, ok := find(cmd.Process.Pid); ok {
		t.Fatalf("a reaped child is still listed")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("1 (init) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0"))
	f.Add([]byte("77 (a) b) (c) R 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0 0"))
	f.Add([]byte("()"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrStat) {
				t.Fatalf("error %v is not ErrStat", err)
			}
			return
		}
		if st.PID < 0 || st.PPID < 0 {
			t.Fatalf("negative pid accepted: %+v", st)
		}
	})
}
