package wrapped_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/kennel-dev/kennel/internal/procfs"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/transports"
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

// client speaks just enough of the protocol for these tests.
type client struct {
	k      transports.Kernel
	frames chan map[string]any
	seq    int
}

func newClient(k transports.Kernel) *client {
	c := &client{k: k, frames: make(chan map[string]any, 256)}
	go func() {
		defer close(c.frames)
		sc := bufio.NewScanner(k.Stdout())
		sc.Buffer(make([]byte, 64<<10), 32<<20)
		for sc.Scan() {
			var f map[string]any
			if json.Unmarshal(sc.Bytes(), &f) == nil {
				c.frames <- f
			}
		}
	}()
	return c
}

// start starts a kernel, reads its hello, and kills it when the test ends.
func start(t *testing.T, tr transports.Transport, spec transports.Spec) (transports.Kernel, *client, *lockedBuffer) {
	t.Helper()
	if spec.SessionID == "" {
		spec.SessionID = "wt"
	}
	stderr := &lockedBuffer{}
	spec.Stderr = stderr
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	k, err := tr.Start(ctx, spec)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	c := newClient(k)
	t.Cleanup(func() {
		killAndWait(t, k)
		for range c.frames {
		}
		if t.Failed() {
			t.Logf("kernel stderr:\n%s", stderr.String())
		}
	})
	f, err := c.next()
	if err != nil || f["event"] != "hello" {
		t.Fatalf("hello: %v, %v; stderr:\n%s", f, err, stderr.String())
	}
	return k, c, stderr
}

func killAndWait(t testing.TB, k transports.Kernel) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := k.Kill(ctx); err != nil {
		t.Errorf("kill: %v", err)
	}
	if _, err := k.Wait(); err != nil {
		t.Errorf("wait: %v", err)
	}
}

func (c *client) next() (map[string]any, error) {
	select {
	case f, ok := <-c.frames:
		if !ok {
			return nil, fmt.Errorf("kernel stdout ended")
		}
		return f, nil
	case <-time.After(wait):
		return nil, fmt.Errorf("no frame within %v", wait)
	}
}

func (c *client) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = c.k.Stdin().Write(append(b, '\n'))
	return err
}

// run executes a cell that must succeed and returns what it printed.
func (c *client) run(t testing.TB, code string) string {
	t.Helper()
	c.seq++
	id := "c" + strconv.Itoa(c.seq)
	if err := c.write(map[string]string{"type": "execute", "id": id, "code": code}); err != nil {
		t.Fatalf("execute: %v", err)
	}
	var out strings.Builder
	for {
		f, err := c.next()
		if err != nil {
			t.Fatalf("cell %q: %v", code, err)
		}
		if f["id"] != id {
			continue
		}
		switch f["event"] {
		case "stream":
			if f["name"] == "stdout" {
				out.WriteString(f["text"].(string))
			}
		case "done":
			if f["status"] != "ok" {
				t.Fatalf("cell %q: %v", code, f)
			}
			return out.String()
		}
	}
}

// job starts a shell job and waits for its job_start frame.
func (c *client) job(t testing.TB, command string) {
	t.Helper()
	c.seq++
	id := "j" + strconv.Itoa(c.seq)
	if err := c.write(map[string]string{"type": "job_run", "id": id, "command": command}); err != nil {
		t.Fatalf("job_run: %v", err)
	}
	for {
		f, err := c.next()
		if err != nil {
			t.Fatalf("job %q: %v", command, err)
		}
		if f["id"] == id && f["event"] == "job_start" {
			return
		}
		if f["id"] == id && f["event"] == "job_end" {
			t.Fatalf("job %q ended at once: %v", command, f)
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
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, ppid, start := stat(n); start != "" && s != "Z" {
			children[ppid] = append(children[ppid], proc{n, start})
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
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
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
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func randomHex() string { return fmt.Sprintf("%016x", rand.Uint64()) }

func itoa(n int) string { return strconv.Itoa(n) }

// busy starts a cell that holds the kernel's main thread, and returns once it runs.
func (c *client) busy(t testing.TB) {
	t.Helper()
	if err := c.write(map[string]string{"type": "execute", "id": "busy", "code": "print('busy', flush=True)\nwhile True: pass"}); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := c.next()
		if err != nil {
			t.Fatalf("busy cell: %v", err)
		}
		if f["id"] == "busy" && f["event"] == "stream" {
			return
		}
		if f["id"] == "busy" && f["event"] == "done" {
			t.Fatalf("busy cell ended: %v", f)
		}
	}
}

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
