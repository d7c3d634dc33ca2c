package nsmount

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kennel-dev/kennel/internal/testneed"
)

// TestTheMoverThreadNeverEnds: every call runs on one thread, which lives on after it:
// a child started from it with a parent-death signal (as the local transport's reapers
// are) outlives any number of calls. A thread that ended after entering a namespace (the
// first version) killed such children.
func TestTheMoverThreadNeverEnds(t *testing.T) {
	testneed.Root(t) // setns(CLONE_NEWNS) needs CAP_SYS_ADMIN
	self, err := os.Open("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	var tid int
	var child *exec.Cmd
	if err := inNamespace(self, func() error {
		tid = unix.Gettid()
		child = exec.Command("sleep", "60")
		child.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		return child.Start()
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	for range 50 {
		var got int
		if err := inNamespace(self, func() error { got = unix.Gettid(); return nil }); err != nil {
			t.Fatal(err)
		}
		if got != tid {
			t.Fatalf("a call ran on thread %d, the first on %d", got, tid)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(tid)); err != nil {
		t.Fatalf("the mover thread %d ended: %v", tid, err)
	}
	if err := child.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the child of the mover thread is gone: %v", err)
	}
}

// TestIntoRefusesWhatNoEngineMounts: a target over the root, or a relative path, is
// refused before anything is cloned.
func TestIntoRefusesWhatNoEngineMounts(t *testing.T) {
	for _, b := range []Bind{{Host: "/tmp", Target: "/"}, {Host: "/tmp", Target: "work"}, {Host: "tmp", Target: "/work"}} {
		if err := Into(nil, []Bind{b}); err == nil {
			t.Errorf("%+v: mounted", b)
		}
	}
}
