package images

import (
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testproc"
)

func TestEOFExitsZero(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	k.result("c1", "1")
	k.stdin.Close()
	if code := k.waitExit(); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
}

func TestShutdownFrameExitsAndEndsJobs(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	start := k.jobRun("j1", "sleep 1000")
	pgid := num(t, start.M["pgid"])
	k.send("shutdown", "")
	_, _, end := k.jobOutput("j1")
	if num(t, end.M["signal"]) != int(syscall.SIGTERM) {
		t.Errorf("job_end = %s", end)
	}
	if code := k.waitExit(); code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
	eventually(t, "job group gone", func() bool { return groupGone(pgid) })
}

func TestEOFKillsJobsThatIgnoreTERM(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	start := k.jobRun("j1", `trap '' TERM; echo ready; while :; do sleep 0.05; done`)
	pgid := num(t, start.M["pgid"])
	k.until(func(f frame) bool { return f.ID == "j1" && f.Event == "job_output" })
	k.stdin.Close()
	_, _, end := k.jobOutput("j1")
	if num(t, end.M["signal"]) != int(syscall.SIGKILL) {
		t.Errorf("job_end = %s, want SIGKILL after TERM was ignored", end)
	}
	if code := k.waitExit(); code != 0 {
		t.Errorf("exit code = %d", code)
	}
	eventually(t, "job group gone", func() bool { return groupGone(pgid) })
}

func TestEOFWhileACellHoldsTheKernelExitsAfterTheGrace(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{env: []string{EnvEOFGrace + "=1"}})
	k.startCell("c1", "print('go')\nwhile True:\n    pass")
	k.send("execute", "c2", "code", "'queued'")
	k.stdin.Close()
	started := time.Now()
	var dones []frame
	for f := range k.frames {
		if f.Err != nil {
			t.Errorf("bad frame: %v", f.Err)
		}
		if f.Event == "done" {
			dones = append(dones, f)
		}
	}
	if code := k.waitExit(); code != 0 {
		t.Errorf("exit code = %d", code)
	}
	// The exit came from the grace timer (not the cell ending): no done for c1.
	if len(dones) != 0 {
		t.Errorf("done frames after EOF: %v", dones)
	}
	t.Logf("exit %v after EOF (grace 1s)", time.Since(started))
}

func TestEOFAnswersCellsNotStarted(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{env: []string{EnvEOFGrace + "=5"}})
	k.startCell("c1", "import time\nprint('go')\ntime.sleep(0.3)\n'first'")
	k.send("execute", "c2", "code", "'second'")
	k.stdin.Close()
	got := k.until(isDone("c1"))
	if done := got[len(got)-1]; done.str("result") != "'first'" {
		t.Errorf("running cell: %s", done)
	}
	got = k.until(isDone("c2"))
	if e, _ := got[len(got)-1].M["error"].(map[string]any); e["ename"] != "KernelShutdown" {
		t.Errorf("queued cell: %s", got[len(got)-1])
	}
	if code := k.waitExit(); code != 0 {
		t.Errorf("exit code = %d", code)
	}
}

func TestEOFFailsAPendingHostRequest(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	k.send("execute", "c1", "code", "kennel.host_request('never')")
	k.hostRequest()
	k.stdin.Close()
	got := k.until(isDone("c1"))
	if e, _ := got[len(got)-1].M["error"].(map[string]any); e["ename"] != "HostError" || e["evalue"] != "closed: the kernel is shutting down" {
		t.Errorf("done = %s", got[len(got)-1])
	}
	if code := k.waitExit(); code != 0 {
		t.Errorf("exit code = %d", code)
	}
}

func startOwner(t *testing.T) *exec.Cmd {
	t.Helper()
	owner := exec.Command("sleep", "1000")
	if err := owner.Start(); err != nil {
		testneed.Missing(t, "sleep", err)
	}
	t.Cleanup(func() {
		owner.Process.Kill()
		owner.Wait()
	})
	return owner
}

func TestOwnerDeathEndsTheKernel(t *testing.T) {
	t.Parallel()
	owner := startOwner(t)
	k := startKernel(t, kernelOpts{env: []string{EnvOwnerPID + "=" + strconv.Itoa(owner.Process.Pid)}})
	start := k.jobRun("j1", "sleep 1000")
	pgid := num(t, start.M["pgid"])
	k.result("c1", "1")
	owner.Process.Kill()
	owner.Wait()
	if code := k.waitExit(); code != 0 {
		t.Errorf("exit code = %d", code)
	}
	eventually(t, "job group gone", func() bool { return groupGone(pgid) })
}

func TestOwnerZombieCountsAsDead(t *testing.T) {
	t.Parallel()
	owner := startOwner(t)
	k := startKernel(t, kernelOpts{env: []string{EnvOwnerPID + "=" + strconv.Itoa(owner.Process.Pid)}})
	k.result("c1", "1")
	testproc.Kill(owner.Process.Pid, syscall.SIGKILL) // dead, not reaped: a zombie
	if code := k.waitExit(); code != 0 {
		t.Errorf("exit code = %d", code)
	}
}

func TestStdinOwnerIgnoresThePid(t *testing.T) {
	t.Parallel()
	owner := startOwner(t)
	pid := owner.Process.Pid
	owner.Process.Kill()
	owner.Wait()
	k := startKernel(t, kernelOpts{env: []string{EnvOwner + "=stdin", EnvOwnerPID + "=" + strconv.Itoa(pid)}})
	// Longer than the watcher's 0.5 s period: a watcher would have ended the kernel.
	if got := k.result("c1", "import time; time.sleep(1.2); 'alive'"); got != "'alive'" {
		t.Errorf("result = %s", got)
	}
	k.stdin.Close()
	if code := k.waitExit(); code != 0 {
		t.Errorf("exit code = %d", code)
	}
}

func TestBadOwnerPidIsLogged(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{env: []string{EnvOwnerPID + "=abc"}})
	got := k.until(func(f frame) bool { return f.Event == "log" })
	if got[len(got)-1].str("level") != "warning" {
		t.Errorf("log = %s", got[len(got)-1])
	}
	if r := k.result("c1", "1"); r != "1" {
		t.Errorf("result = %s", r)
	}
}

func TestSIGTERMEndsJobsThenExits(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	start := k.jobRun("j1", "sleep 1000")
	pgid := num(t, start.M["pgid"])
	k.startCell("c1", "print('go')\nwhile True:\n    pass")
	k.cmd.Process.Signal(syscall.SIGTERM)
	_, _, end := k.jobOutput("j1")
	if num(t, end.M["signal"]) != int(syscall.SIGTERM) {
		t.Errorf("job_end = %s", end)
	}
	if code := k.waitExit(); code != 143 {
		t.Errorf("exit code = %d, want 143", code)
	}
	eventually(t, "job group gone", func() bool { return groupGone(pgid) })
}
