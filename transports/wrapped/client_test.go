package wrapped_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/procfs"
	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/transports/transporttest"
	"github.com/kennel-dev/kennel/transports/wrapped"
	"github.com/kennel-dev/kennel/transports/wrapped/wrappedtest"
)

// wait bounds every wait in these tests. It is a failure bound, not a timing assertion.
const wait = 30 * time.Second

// testOptions are short graces, so kills and drains end fast.
func testOptions() wrapped.Options {
	return wrapped.Options{
		StdinGrace: 500 * time.Millisecond,
		TermGrace:  500 * time.Millisecond,
		DrainGrace: 500 * time.Millisecond,
		EOFGrace:   time.Second,
	}
}

// wrapper names one real wrapper the tests run against.
type wrapper struct {
	name string
	make func(t testing.TB, base wrapped.Options) *wrappedtest.Sandbox
	// ownPIDs: the sandbox has its own pid namespace, so every process in it ends with
	// the kernel, also those a cell detached from it.
	ownPIDs bool
}

var wrappers = []wrapper{
	{"setsid", wrappedtest.Setsid, false},
	{"bwrap", wrappedtest.Bwrap, true},
}

// run runs a cell that must succeed and returns what it wrote to stdout.
func run(t testing.TB, c *transporttest.Client, code string) string {
	t.Helper()
	out, err := c.Run(code)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// job starts a shell job and waits for its job_start frame.
func job(t testing.TB, c *transporttest.Client, command string) {
	t.Helper()
	if err := c.Job(command); err != nil {
		t.Fatal(err)
	}
}

// busy starts a cell that holds the kernel's main thread, and returns once it runs.
func busy(t testing.TB, c *transporttest.Client) {
	t.Helper()
	id, err := c.Send("print('busy', flush=True)\nwhile True: pass")
	if err != nil {
		t.Fatal(err)
	}
	for {
		f, err := c.Next()
		if err != nil {
			t.Fatalf("busy cell: %v", err)
		}
		if f.ID() == id && f.Event() == "stream" {
			return
		}
		if f.ID() == id && f.Event() == "done" {
			t.Fatalf("busy cell ended: %s", f.Raw)
		}
	}
}

// marker returns a fresh "KEY=VALUE" entry that every process of one kernel inherits,
// so the host can find them in /proc whatever pid namespace they are in.
func marker() (key, value string) {
	return "KENNEL_WRAPPED_TEST_MARK", fmt.Sprintf("m%016x", rand.Uint64())
}

// marked lists the host pids whose environment holds key=value.
func marked(key, value string) []int {
	want := []byte(key + "=" + value + "\x00")
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		if bytes.HasPrefix(b, want) || bytes.Contains(b, append([]byte{0}, want...)) {
			if state(pid) != "Z" {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// proc names a host process across pid reuse: its pid and start time.
type proc struct {
	pid   int
	start string
}

// stat reads a process's state, parent and start time ("" when gone).
func stat(pid int) (state string, ppid int, start string) {
	st, err := procfs.Read(pid)
	if err != nil {
		return "", 0, ""
	}
	return string(st.State), st.PPID, strconv.FormatUint(st.Start, 10)
}

func state(pid int) string {
	s, _, _ := stat(pid)
	return s
}

// alive reports whether p still runs (a zombie has ended).
func (p proc) alive() bool {
	s, _, start := stat(p.pid)
	return start == p.start && s != "Z"
}

// descendants lists the live processes below pid on the host (pid itself excluded).
func descendants(pid int) []proc {
	children := map[int][]proc{}
	all, _ := procfs.All()
	for _, st := range all {
		if !st.Zombie() {
			children[st.PPID] = append(children[st.PPID], proc{st.PID, strconv.FormatUint(st.Start, 10)})
		}
	}
	var out []proc
	queue := []int{pid}
	for len(queue) > 0 {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
		queue = queue[1:]
	}
	return out
}

// eventuallyGone waits up to d for every process of ps to end; it returns those left,
// after killing them.
func eventuallyGone(ps []proc, d time.Duration) []proc {
	deadline := time.Now().Add(d)
	for {
		var left []proc
		for _, p := range ps {
			if p.alive() {
				left = append(left, p)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			for _, p := range left {
				_ = testproc.Kill(p.pid, syscall.SIGKILL)
			}
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// eventuallyNoneMarked waits up to d for every marked process to end; it returns those
// left, after killing them.
func eventuallyNoneMarked(key, value string, d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		left := marked(key, value)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			for _, pid := range left {
				_ = testproc.Kill(pid, syscall.SIGKILL)
			}
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func randomHex() string { return fmt.Sprintf("%016x", rand.Uint64()) }

func itoa(n int) string { return strconv.Itoa(n) }

// waitMarked waits until at least n processes carry the marker.
func waitMarked(t testing.TB, key, value string, n int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for len(marked(key, value)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d marked processes, want %d", len(marked(key, value)), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
