package images

import (
	"strings"
	"testing"
)

// grow is a cell that grows a list by 1 MiB every 5 ms (200 MiB/s at most), so a cap of
// 64 MiB is passed within a fraction of a second and overshot by little.
const grow = `import time
big = []
for _ in range(100000):
    big.append(b"x" * (1 << 20))
    time.sleep(0.005)
`

func TestAMemoryCapInterruptsTheGrowingCellAndKeepsTheNamespace(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{env: []string{"KENNEL_KERNEL_MEMORY_BYTES=" + itoa(64<<20)}})
	_, done := k.execute("c1", grow)
	if done.str("status") != "interrupted" || done.str("reason") != "memory" {
		t.Fatalf("growing cell: %s, want interrupted with reason memory", done)
	}
	note := done.str("note")
	for _, want := range []string{"64.0 MiB", "KENNEL_KERNEL_MEMORY_BYTES", "big (list"} {
		if !strings.Contains(note, want) {
			t.Errorf("note %q does not name %q", note, want)
		}
	}
	// The namespace stays: big is there, at the size the interrupt left it.
	if got := k.result("c2", "len(big) > 10"); got != "True" {
		t.Errorf("len(big) > 10 = %s after the interrupt", got)
	}
	// The kernel is past its cap now: a cell that frees what it holds runs, and so does
	// one that allocates a little.
	if got := k.result("c3", "small = [0] * 1000; len(small)"); got != "1000" {
		t.Errorf("a small cell past the cap: %s", got)
	}
	if got := k.result("c4", "del big; import gc; gc.collect(); 'freed'"); got != "'freed'" {
		t.Errorf("del past the cap: %s", got)
	}
	// Under the cap again, the cap holds again.
	_, done = k.execute("c5", grow)
	if done.str("status") != "interrupted" || done.str("reason") != "memory" {
		t.Fatalf("second growing cell: %s, want interrupted with reason memory", done)
	}
}

func TestACellStartedPastTheCapIsInterruptedEightMiBOverItsStart(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{env: []string{"KENNEL_KERNEL_MEMORY_BYTES=" + itoa(64<<20)}})
	// Past the cap in one allocation the guard cannot see coming (it samples while a
	// cell runs; this cell ends within one interval).
	if got := k.result("c1", "held = b'y' * (96 << 20); len(held) >> 20"); got != "96" {
		t.Fatalf("allocation: %s", got)
	}
	_, done := k.execute("c2", grow)
	if done.str("status") != "interrupted" || done.str("reason") != "memory" {
		t.Fatalf("growing cell past the cap: %s", done)
	}
	if got := k.result("c3", "len(big) >= 6"); got != "True" {
		t.Errorf("the cell started past the cap was interrupted before 8 MiB over its start: %s", got)
	}
}

func TestNoMemoryCapWhenItIsZero(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{env: []string{"KENNEL_KERNEL_MEMORY_BYTES=0"}})
	_, done := k.execute("c1", "import time\nheld = b'z' * (300 << 20)\ntime.sleep(0.3)\nlen(held) >> 20")
	if done.str("status") != "ok" || done.str("result") != "300" {
		t.Fatalf("a cell over the default cap with no cap: %s", done)
	}
}
