package images

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"
)

// sendRaw writes frames to the kernel in one write, so they reach it together.
func (k *kernel) sendRaw(frames ...[]byte) {
	k.t.Helper()
	if _, err := k.stdin.Write(bytes.Join(frames, nil)); err != nil {
		k.t.Fatalf("send: %v", err)
	}
}

// rss is the kernel's resident set size as /proc says it ("" where it cannot tell).
func (k *kernel) rss() string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(k.cmd.Process.Pid) + "/status")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// wasCancelled fails the test unless done says its cell was interrupted before it ran: the
// done of an interrupted cell (status interrupted, no result, no error).
func wasCancelled(t testing.TB, done frame) {
	t.Helper()
	if done.str("status") != "interrupted" || done.M["result"] != nil || done.M["error"] != nil {
		t.Errorf("done = %s, want status interrupted, result and error null", done)
	}
}

// undefined fails the test unless name is not defined in the kernel's namespace: the
// cell that would have defined it never ran.
func (k *kernel) undefined(id, name string) {
	k.t.Helper()
	_, done := k.execute(id, name)
	if e, _ := done.M["error"].(map[string]any); done.str("status") != "error" || e["ename"] != "NameError" {
		k.t.Errorf("%s after its cell was interrupted before it ran: %s, want NameError", name, done)
	}
}

// TestInterruptOfAQueuedCellCancelsIt interrupts a cell queued behind a running one: it
// is answered interrupted when its turn comes and its code never runs; the running cell is
// untouched.
func TestInterruptOfAQueuedCellCancelsIt(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	k.startCell("c1", "import time\nprint('go')\ntime.sleep(2)\n'slept'")
	k.send("execute", "c2", "code", "x = 1")
	k.send("interrupt", "c2")
	got := k.until(isDone("c1"))
	if done := got[len(got)-1]; done.str("status") != "ok" || done.str("result") != "'slept'" {
		t.Errorf("running cell: %s, want ok 'slept'", done)
	}
	got = k.until(isDone("c2"))
	wasCancelled(t, got[len(got)-1])
	for _, f := range got {
		if f.ID == "c2" && f.Event != "done" {
			t.Errorf("frame of the cancelled cell: %s", f)
		}
	}
	k.undefined("c3", "x")
	if got := k.result("c4", "'alive'"); got != "'alive'" {
		t.Errorf("after = %s", got)
	}
}

// TestInterruptDuringStartUpCancelsTheCell sends a cell and its interrupt right after the
// hello, while the stub is still starting (importing the rest of itself, site.main): the
// cell is answered interrupted and never runs, in either order of the two frames.
func TestInterruptDuringStartUpCancelsTheCell(t *testing.T) {
	t.Parallel()
	orders := map[string]func(id string) [][]byte{
		"execute then interrupt": func(id string) [][]byte {
			return [][]byte{hostFrame("execute", id, "code", "x = 1"), hostFrame("interrupt", id)}
		},
		"interrupt then execute": func(id string) [][]byte {
			return [][]byte{hostFrame("interrupt", id), hostFrame("execute", id, "code", "x = 1")}
		},
	}
	for name, frames := range orders {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			k := startKernel(t, kernelOpts{})
			k.sendRaw(frames("c1")...)
			got := k.until(isDone("c1"))
			wasCancelled(t, got[len(got)-1])
			k.undefined("c2", "x")
		})
	}
}

// TestInterruptOfAFinishedCellIsIgnored: an interrupt that comes after its cell's done
// cancels nothing, not even a later cell under the same id.
func TestInterruptOfAFinishedCellIsIgnored(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	if got := k.result("c1", "1"); got != "1" {
		t.Fatalf("c1 = %s", got)
	}
	k.send("interrupt", "c1")
	if got := k.result("c1", "2"); got != "2" {
		t.Errorf("c1 again after an interrupt of the finished c1 = %s, want 2", got)
	}
}

// TestInterruptsOfUnknownIdsAreBounded sends 5000 interrupts for ids the kernel never saw:
// it remembers only the newest 1024 (the oldest is forgotten, the newest still cancels its
// cell), and every other cell runs as usual.
func TestInterruptsOfUnknownIdsAreBounded(t *testing.T) {
	t.Parallel()
	const n, remembered = 5000, 1024
	k := startKernel(t, kernelOpts{})
	k.result("warm", "1")
	before := k.rss()
	var b bytes.Buffer
	for i := 0; i < n; i++ {
		b.Write(hostFrame("interrupt", "u"+strconv.Itoa(i)))
	}
	k.sendRaw(b.Bytes())
	got := k.result("size", "len(kennel._rt.early_interrupts)")
	t.Logf("interrupts remembered after %d of unknown ids: %s; RSS %s before, %s after", n, got, before, k.rss())
	if size, err := strconv.Atoi(got); err != nil || size > remembered {
		t.Errorf("interrupts remembered = %s, want at most %d", got, remembered)
	}
	if got := k.result("u0", "'oldest runs'"); got != "'oldest runs'" {
		t.Errorf("u0 (its interrupt forgotten) = %s", got)
	}
	_, done := k.execute("u"+strconv.Itoa(n-1), "'newest runs'")
	wasCancelled(t, done)
	if got := k.result("c1", "'alive'"); got != "'alive'" {
		t.Errorf("after = %s", got)
	}
}
