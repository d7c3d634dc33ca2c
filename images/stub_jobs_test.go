package images

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"pgregory.net/rapid"
)

// jobRun starts a job and returns its job_start frame.
func (k *kernel) jobRun(id, command string) frame {
	k.t.Helper()
	k.send("job_run", id, "command", command)
	got := k.until(func(f frame) bool { return f.ID == id && strings.HasPrefix(f.Event, "job_") })
	start := got[len(got)-1]
	if start.Event != "job_start" {
		k.t.Fatalf("first job frame: %s", start)
	}
	return start
}

// jobOutput collects job id's output until its job_end.
func (k *kernel) jobOutput(id string) (stdout, stderr []byte, end frame) {
	k.t.Helper()
	var out, errb bytes.Buffer
	for {
		f := k.next()
		if f.ID != id {
			continue
		}
		switch f.Event {
		case "job_output":
			data, err := base64.StdEncoding.DecodeString(f.str("data"))
			if err != nil {
				k.t.Fatalf("job_output data: %v", err)
			}
			switch f.str("name") {
			case "stdout":
				out.Write(data)
			case "stderr":
				errb.Write(data)
			default:
				k.t.Fatalf("job_output name: %s", f)
			}
		case "job_end":
			return out.Bytes(), errb.Bytes(), f
		default:
			k.t.Fatalf("unexpected job frame: %s", f)
		}
	}
}

// noMoreJobFrames runs a cell and checks no frame of job id came meanwhile.
func (k *kernel) noMoreJobFrames(id string) {
	k.t.Helper()
	k.send("execute", "sync-"+id, "code", "import time; time.sleep(0.2)")
	for _, f := range k.until(isDone("sync-" + id)) {
		if f.ID == id {
			k.t.Errorf("frame after job_end: %s", f)
		}
	}
}

func TestJobOutputAndExitCode(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	k.send("job_run", "j0", "command", "printf hi")
	got := k.until(func(f frame) bool { return f.ID == "j0" && f.Event == "job_output" })
	// The controller decodes job_output fast in exactly this layout.
	if raw := string(got[len(got)-1].Raw); raw != `{"event":"job_output","id":"j0","name":"stdout","data":"aGk="}`+"\n" {
		t.Errorf("job_output layout: %s", raw)
	}
	k.jobOutput("j0")
	start := k.jobRun("j1", `printf 'out'; printf 'err' >&2; exit 7`)
	pid := num(t, start.M["pid"])
	if num(t, start.M["pgid"]) != pid || start.str("command") != `printf 'out'; printf 'err' >&2; exit 7` {
		t.Errorf("job_start = %s", start)
	}
	out, errb, end := k.jobOutput("j1")
	if string(out) != "out" || string(errb) != "err" {
		t.Errorf("output = %q, %q", out, errb)
	}
	if num(t, end.M["exit_code"]) != 7 || end.M["signal"] != nil {
		t.Errorf("job_end = %s", end)
	}
	k.noMoreJobFrames("j1")

	k.jobRun("j2", `kill -9 $$`)
	_, _, end = k.jobOutput("j2")
	if end.M["exit_code"] != nil || num(t, end.M["signal"]) != 9 {
		t.Errorf("job_end = %s", end)
	}
}

func TestJobBytesAreExactAcrossWrites(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	// A UTF-8 character split across two writes, and bytes that are not UTF-8.
	k.jobRun("j1", `printf '\342\202'; sleep 0.1; printf '\254'; printf '\377\000\n' >&2`)
	out, errb, end := k.jobOutput("j1")
	if !bytes.Equal(out, []byte("\xe2\x82\xac")) || !bytes.Equal(errb, []byte{0xff, 0, '\n'}) {
		t.Errorf("output = %x, %x", out, errb)
	}
	if num(t, end.M["exit_code"]) != 0 {
		t.Errorf("job_end = %s", end)
	}
}

func TestJobOutputPropertyExactBytes(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		id := fmt.Sprintf("p%d", n)
		chunks := rapid.SliceOfN(rapid.SliceOfN(rapid.Byte(), 0, 300), 1, 4).Draw(rt, "chunks")
		var cmd strings.Builder
		var want []byte
		for i, c := range chunks {
			if i > 0 {
				cmd.WriteString("; sleep 0.01; ")
			}
			cmd.WriteString("printf '")
			for _, b := range c {
				fmt.Fprintf(&cmd, "\\%03o", b)
			}
			cmd.WriteString("'")
			want = append(want, c...)
		}
		k.jobRun(id, cmd.String())
		out, errb, end := k.jobOutput(id)
		if !bytes.Equal(out, want) || len(errb) != 0 {
			rt.Fatalf("stdout = %x, want %x (stderr %q)", out, want, errb)
		}
		if num(t, end.M["exit_code"]) != 0 {
			rt.Fatalf("job_end = %s", end)
		}
	})
}

func TestJobStdinIsDevNullAndCwdIsTheKernels(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k := startKernel(t, kernelOpts{dir: dir})
	k.jobRun("j1", `cat; pwd`)
	out, _, end := k.jobOutput("j1")
	if string(out) != dir+"\n" || num(t, end.M["exit_code"]) != 0 {
		t.Errorf("output %q, end %s", out, end)
	}
}

func TestJobKillWithClosedPipesKillsTheGroup(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	start := k.jobRun("j1", `exec >&- 2>&-; sleep 1000`)
	pgid := num(t, start.M["pgid"])
	k.result("c1", "1") // the job runs with both pipes closed; no job_end yet
	if groupGone(pgid) {
		t.Fatal("job group gone before the kill")
	}
	k.send("job_kill", "j1")
	_, _, end := k.jobOutput("j1")
	if end.M["exit_code"] != nil || num(t, end.M["signal"]) != int(syscall.SIGTERM) {
		t.Errorf("job_end = %s", end)
	}
	// A member the shell forked may stay a zombie until init reaps it.
	eventually(t, "group gone", func() bool { return groupGone(pgid) })
	k.noMoreJobFrames("j1")
}

func TestJobKillReachesTheWholeGroup(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	start := k.jobRun("j1", `sleep 1000 & sleep 1000 & echo started; wait`)
	pgid := num(t, start.M["pgid"])
	got := k.until(func(f frame) bool { return f.ID == "j1" && f.Event == "job_output" })
	_ = got
	k.send("job_kill", "j1", "signal", int(syscall.SIGKILL))
	_, _, end := k.jobOutput("j1")
	if num(t, end.M["signal"]) != int(syscall.SIGKILL) {
		t.Errorf("job_end = %s", end)
	}
	eventually(t, "group gone", func() bool { return groupGone(pgid) })
	k.noMoreJobFrames("j1")
}

func TestJobEndWaitsForBothPipes(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	// The shell exits at once; a background child keeps stdout open a while and writes.
	k.jobRun("j1", `(sleep 0.3; echo late) & exit 0`)
	out, _, end := k.jobOutput("j1")
	if string(out) != "late\n" || num(t, end.M["exit_code"]) != 0 {
		t.Errorf("output %q, end %s", out, end)
	}
}

func TestJobKillAfterExitWhileAChildHoldsThePipe(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	start := k.jobRun("j1", `sleep 1000 & echo up; exit 3`)
	pgid := num(t, start.M["pgid"])
	k.until(func(f frame) bool { return f.ID == "j1" && f.Event == "job_output" })
	k.result("c1", "import time; time.sleep(0.2)") // the shell has exited; sleep holds stdout
	k.send("job_kill", "j1")
	_, _, end := k.jobOutput("j1")
	if num(t, end.M["exit_code"]) != 3 {
		t.Errorf("job_end = %s", end)
	}
	eventually(t, "group gone", func() bool { return groupGone(pgid) })
}

func TestJobFrameErrors(t *testing.T) {
	t.Parallel()
	k := startKernel(t, kernelOpts{})
	k.send("job_run", "bad", "command", 5)
	got := k.until(func(f frame) bool { return f.Event == "job_end" && f.ID == "bad" })
	if end := got[len(got)-1]; end.M["exit_code"] != nil || end.M["signal"] != nil {
		t.Errorf("job_end = %s", end)
	}
	k.jobRun("dup", "sleep 1000")
	k.send("job_run", "dup", "command", "echo second")
	got = k.until(func(f frame) bool { return f.Event == "log" })
	if !strings.Contains(got[len(got)-1].str("message"), "running") {
		t.Errorf("duplicate job id: %s", got[len(got)-1])
	}
	k.send("job_kill", "dup", "signal", 0)
	got = k.until(func(f frame) bool { return f.Event == "log" })
	if !strings.Contains(got[len(got)-1].str("message"), "bad signal") {
		t.Errorf("bad signal: %s", got[len(got)-1])
	}
	k.send("job_kill", "dup", "signal", 9)
	_, _, end := k.jobOutput("dup")
	if num(t, end.M["signal"]) != 9 {
		t.Errorf("job_end = %s", end)
	}
	if got := k.result("c", "kennel.jobs.running()"); got != "{}" {
		t.Errorf("running = %s", got)
	}
}
