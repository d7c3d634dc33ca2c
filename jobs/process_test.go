package jobs

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/output"
)

// runShellJob starts a real /bin/sh job in its own process group, the way the kernel runs
// shell jobs: the owner kills the group, a reader feeds its stdout to the job, and the end
// is reported from the process's exit, after its output is drained.
func runShellJob(t *testing.T, tb *Table, command string) *Job {
	t.Helper()
	sh := testneed.Tool(t, "sh")
	cmd := exec.Command(sh, "-c", command)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	owner := OwnerFunc(func(context.Context) error { return testproc.KillGroup(pgid, syscall.SIGTERM) })
	j, err := tb.Start(Spec{Command: command, PID: pgid, Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testproc.KillGroup(pgid, syscall.SIGKILL) })
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := stdout.Read(buf)
			if n > 0 {
				_ = j.Output(buf[:n])
			}
			if err != nil {
				break
			}
		}
		_ = cmd.Wait()
		ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
		end := Exited(ws.ExitStatus())
		if ws.Signaled() {
			end = Signaled(int(ws.Signal()))
		}
		_ = j.Finish(end)
	}()
	return j
}

func waitForOutput(t *testing.T, j *Job, n int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); j.Capture().Stat().Seen < n; {
		if time.Now().After(deadline) {
			t.Fatalf("job %v wrote %d bytes, want %d", j.ID(), j.Capture().Stat().Seen, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func groupGone(t *testing.T, pgid int) {
	t.Helper()
	if err := testproc.KillGroup(pgid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("process group %d still exists: %v", pgid, err)
	}
}

func TestRealJobDetachesThenEndsAfterItsKill(t *testing.T) {
	tb := newTable(t, TableOptions{Capture: output.CaptureOptions{SpillDir: spillDir(t)}})
	for _, command := range []string{
		"echo started; exec sleep 30",
		"echo started; exec >&- 2>&-; exec sleep 30", // closed its stdout and stderr
	} {
		t.Run(command, func(t *testing.T) {
			j := runShellJob(t, tb, command)
			waitForOutput(t, j, 8)
			d, ok := Wait(context.Background(), j, time.Now().Add(200*time.Millisecond)).(Detached)
			if !ok || string(d.Output.Kept) != "started\n" || d.Err != nil {
				t.Fatalf("Wait on a sleeping job = %#v, want Detached with its output", d)
			}
			if _, ended := j.End(); ended {
				t.Fatal("the job ended before its kill")
			}
			if err := j.Kill(context.Background()); err != nil {
				t.Fatal(err)
			}
			s, ok := Wait(context.Background(), j, time.Now().Add(10*time.Second)).(Settled)
			if !ok || s.End.Signal != int(syscall.SIGTERM) || !s.End.Killed || string(s.Output.Kept) != "started\n" {
				t.Fatalf("Wait after the kill = %#v, want Settled by SIGTERM, killed", s)
			}
			pid, _ := j.PID()
			groupGone(t, pid)
			if err := j.Output([]byte("late")); !errors.Is(err, ErrEnded) || j.Late().Outputs != 1 {
				t.Fatalf("output after the end = %v", err)
			}
		})
	}
	if o := tb.Observe(); o.LiveJobCount != 0 {
		t.Fatalf("live jobs after the kills: %+v", o)
	}
}

func TestRealJobExitCodeAndBoundedOutput(t *testing.T) {
	tr := output.On(output.Limits{Lines: 3, Keep: output.Tail})
	tb := newTable(t, TableOptions{Truncation: tr, Capture: output.CaptureOptions{SpillDir: spillDir(t)}})
	j := runShellJob(t, tb, "i=1; while [ $i -le 10 ]; do echo line$i; i=$((i+1)); done; exit 3")
	s, ok := Wait(context.Background(), j, time.Now().Add(10*time.Second)).(Settled)
	if !ok || s.End.ExitCode == nil || *s.End.ExitCode != 3 || s.End.Killed {
		t.Fatalf("Wait = %#v, want Settled with exit 3", s)
	}
	if string(s.Output.Kept) != "line8\nline9\nline10\n" || s.Output.DroppedLines != 7 {
		t.Fatalf("kept %q, dropped %d lines", s.Output.Kept, s.Output.DroppedLines)
	}
	var all []byte
	for i := 1; i <= 10; i++ {
		all = fmt.Appendf(all, "line%d\n", i)
	}
	page, err := j.Capture().ReadPage(0, output.MaxPage)
	if err != nil || string(page.Data) != string(all) || !page.EOF {
		t.Fatalf("capture = %q, %+v, %v", page.Data, page, err)
	}
}

func spillDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "spill")
	if err := output.PrepareDir(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}
