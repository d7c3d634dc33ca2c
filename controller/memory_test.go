package controller_test

import (
	"strings"
	"testing"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/protocol"
)

// growCell grows a list by 1 MiB every 5 ms, so a 64 MiB cap is passed within a fraction
// of a second and overshot by little.
const growCell = `import time
big = []
for _ in range(100000):
    big.append(b"x" * (1 << 20))
    time.sleep(0.005)
`

func TestACellPastTheMemoryCapEndsInterruptedWithReasonMemoryAndTheNamespaceStays(t *testing.T) {
	// The session's cap wins over an entry of Options.Env of the same name.
	s := startSession(t, controller.Options{KernelMemory: 64 << 20, Env: []string{controller.EnvKernelMemory + "=0"}})
	res, _ := execute(t, s, growCell)
	if res.Status != protocol.DoneInterrupted || res.Reason != protocol.ReasonMemory {
		t.Fatalf("growing cell: %+v, want interrupted with reason memory", res)
	}
	if !strings.Contains(res.Note, "64.0 MiB") || !strings.Contains(res.Note, "big (list") {
		t.Errorf("note %q names neither the cap nor what is held", res.Note)
	}
	res, _ = execute(t, s, "len(big) > 10")
	if res.Status != "ok" || res.Result == nil || *res.Result != "True" {
		t.Fatalf("the namespace after the interrupt: %+v", res)
	}
	// Past the cap, a cell that frees what it holds runs.
	res, _ = execute(t, s, "del big; import gc; gc.collect(); 'freed'")
	if res.Status != "ok" || res.Reason != "" {
		t.Fatalf("del past the cap: %+v", res)
	}
}

func TestTheDefaultMemoryCapIsInEveryKernelsEnvironment(t *testing.T) {
	s := startSession(t, controller.Options{})
	res, _ := execute(t, s, "import os; os.environ['KENNEL_KERNEL_MEMORY_BYTES']")
	if res.Result == nil || *res.Result != "'268435456'" {
		t.Fatalf("KENNEL_KERNEL_MEMORY_BYTES = %v, want the default 256 MiB", res.Result)
	}
	s = startSession(t, controller.Options{KernelMemory: -1})
	res, _ = execute(t, s, "import os; os.environ['KENNEL_KERNEL_MEMORY_BYTES']")
	if res.Result == nil || *res.Result != "'0'" {
		t.Fatalf("KENNEL_KERNEL_MEMORY_BYTES = %v, want 0 (no cap)", res.Result)
	}
}
