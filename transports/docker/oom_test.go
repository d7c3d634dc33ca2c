package docker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// oomLimit is the memory limit of the OOM tests: the stub fits, a 1 GB buffer does not.
const oomLimit = 96 << 20

// childOOMCell runs a child that allocates past the limit and prints how it ended (-9:
// the memory limit's SIGKILL) and the container's OOM kill count where cgroup v1 shows it.
const childOOMCell = `import subprocess
r = subprocess.run(["python3", "-c", "b = bytearray(10**9)"])
kills = "?"
try:
    for line in open("/sys/fs/cgroup/memory/memory.oom_control"):
        if line.startswith("oom_kill "):
            kills = line.split()[1]
except OSError:
    pass
print(r.returncode, kills)`

// waitEnd waits for k's end, failing t if it takes more than d (the kernel hung).
func waitEnd(t *testing.T, k transports.Kernel, d time.Duration) (transports.Exit, time.Duration) {
	t.Helper()
	start := time.Now()
	type result struct {
		exit transports.Exit
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		exit, err := k.Wait()
		ch <- result{exit, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Errorf("wait: %v", r.err)
		}
		return r.exit, time.Since(start)
	case <-time.After(d):
		t.Fatalf("the kernel had not ended %v later", d)
	}
	return transports.Exit{}, 0
}

// TestChildOOMIsNotKernelOOM: a cell's child killed by the memory limit while the kernel
// survives (the engine's State.OOMKilled is then true: any process of the container's
// cgroup counts) does not make the kernel's end an OOM: the kernel goes on serving cells,
// then exits 0 at stdin EOF, and Exit.OOM is false.
func TestChildOOMIsNotKernelOOM(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	tr := newTransport(t, cli, docker.Options{Memory: oomLimit})
	k, c := transporttest.Start(t, tr, transports.Spec{Dir: "/tmp"})
	out, err := c.Run(childOOMCell)
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(out); len(f) != 2 || f[0] != "-9" {
		t.Fatalf("the child past the memory limit: %q, want it SIGKILLed (-9)", out)
	} else {
		t.Logf("child returncode %s, container oom_kill count %s", f[0], f[1])
	}
	if got, err := c.Run("print('still here')"); err != nil || !strings.Contains(got, "still here") {
		t.Fatalf("the kernel after its child's OOM kill: %q, %v", got, err)
	}
	if err := k.Stdin().Close(); err != nil {
		t.Fatal(err)
	}
	exit, took := waitEnd(t, k, 30*time.Second)
	t.Logf("exit after stdin EOF: %+v in %v", exit, took)
	if exit.OOM || exit.Code != 0 || exit.Killed {
		t.Errorf("a kernel that exited at stdin EOF after a child's OOM kill: %+v, want code 0, not OOM, not killed", exit)
	}
}

// TestChildOOMThenStopIsNotOOM: after a child's OOM kill, a kernel that ignores stdin EOF
// and SIGTERM is ended by Kill's SIGKILL (exit code 137, as an OOM kill would be): that
// end is Kill's (Exit.Killed), not the memory limit's.
func TestChildOOMThenStopIsNotOOM(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	tr := newTransport(t, cli, docker.Options{Memory: oomLimit, EOFGrace: 120 * time.Second})
	k, c := transporttest.Start(t, tr, transports.Spec{Dir: "/tmp"})
	if out, err := c.Run(childOOMCell); err != nil || !strings.HasPrefix(out, "-9 ") {
		t.Fatalf("the child past the memory limit: %q, %v; want it SIGKILLed (-9)", out, err)
	}
	// The cell holds the main thread with SIGTERM ignored: only SIGKILL ends it.
	hold(t, c, "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('holding', flush=True)\ntime.sleep(600)")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	if err := k.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	exit, _ := waitEnd(t, k, 30*time.Second)
	t.Logf("exit after Kill: %+v in %v", exit, time.Since(start))
	if exit.OOM || !exit.Killed || exit.Code != 137 {
		t.Errorf("a kernel stopped by Kill's SIGKILL after a child's OOM kill: %+v, want code 137, killed, not OOM", exit)
	}
}

// TestKernelOOM: a cell that allocates past the limit in the kernel itself ends the
// kernel by the memory limit: Exit.OOM, not Killed (the controller turns it into
// controller.ErrOOM; TestOOM shows that path). So under the engine's init and as the
// container's pid 1 (NoInit).
func TestKernelOOM(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	for _, noInit := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoInit=%v", noInit), func(t *testing.T) {
			tr := newTransport(t, cli, docker.Options{Memory: oomLimit, NoInit: noInit})
			k, c := transporttest.Start(t, tr, transports.Spec{Dir: "/tmp"})
			if _, err := c.Send("blocks = []\nwhile True:\n    blocks.append(bytearray(16 << 20))"); err != nil {
				t.Fatal(err)
			}
			exit, took := waitEnd(t, k, 30*time.Second)
			t.Logf("exit: %+v in %v", exit, took)
			if !exit.OOM || exit.Killed || exit.Code != 137 {
				t.Errorf("a kernel past the memory limit: %+v, want OOM, code 137, not killed", exit)
			}
		})
	}
}

// TestChildOOMSession: at the controller, a shell job killed by the memory limit ends
// as that job's end only: the session's cells go on, and the kernel's end at Close is
// no OOM (OnKernelEnd's cause does not match controller.ErrOOM).
func TestChildOOMSession(t *testing.T) {
	ls := startSession(t, docker.Options{Memory: oomLimit}, "/tmp")
	ls.run(t, "x = 1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	job, err := ls.s.RunJob(ctx, `exec python3 -c "b = bytearray(10**9)"`, controller.JobOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := ls.s.WaitJob(ctx, job.ID(), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	end, ok := w.Outcome.(jobs.Settled)
	if !ok || w.Err != nil || end.End.Signal != 9 {
		t.Fatalf("the job past the memory limit: %+v, want it settled, ended by SIGKILL", w)
	}
	if got := ls.run(t, "print(x + 1)"); strings.TrimSpace(got) != "2" {
		t.Fatalf("the session after its job's OOM kill: %q", got)
	}
	ls.end()
	var causes []error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ls.mu.Lock()
		causes = append(causes[:0], ls.ke...)
		ls.mu.Unlock()
		if len(causes) > 0 {
			break
		}
	}
	if len(causes) != 1 {
		t.Fatalf("kernel ends after Close: %v, want one", causes)
	}
	if errors.Is(causes[0], controller.ErrOOM) {
		t.Errorf("the kernel's end after its job's OOM kill: %v, want no OOM", causes[0])
	}
}
