package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/spf13/cobra"
)

// runVerb runs one client verb in-process and returns stdout, stderr and the exit code.
func runVerb(t *testing.T, make func() *cobra.Command, args ...string) (string, string, int) {
	t.Helper()
	cmd := make()
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.ExecuteContext(context.Background())
	code := 0
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		code = ee.code
		errb.WriteString(ee.msg)
	case err != nil:
		code = 1
		errb.WriteString(err.Error())
	}
	return out.String(), errb.String(), code
}

// TestServeAndTheClientVerbs runs kennel serve and drives it with create, exec, jobs,
// logs, stop, ps and rm, each also with --json; then stops the daemon as SIGTERM would
// (its context ends) and checks that the socket is gone.
func TestServeAndTheClientVerbs(t *testing.T) {
	base, err := os.MkdirTemp("", "ks")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	sock := filepath.Join(base, "run", "kennel.sock")
	t.Setenv("KENNEL_CONFIG_DIR", filepath.Join(base, "config"))
	ctx, cancel := context.WithCancel(context.Background())
	serve := newServeCmd()
	serve.SetArgs([]string{"--socket", sock, "--state", filepath.Join(base, "state")})
	var serveErr bytes.Buffer
	serve.SetErr(&serveErr)
	done := make(chan error, 1)
	go func() { done <- serve.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	for i := 0; ; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if i > 500 {
			t.Fatalf("no socket: %s", serveErr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	s := []string{"--socket", sock}
	dir := t.TempDir()

	out, errOut, code := runVerb(t, newCreateCmd, append(s, "-C", dir)...)
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	out, errOut, code = runVerb(t, newExecCmd, append(s, id, "-c", "x = 6*7", "-c", "print('hi'); x")...)
	if code != 0 || out != "hi\n42\n" {
		t.Fatalf("exec: %d %q %q", code, out, errOut)
	}
	out, errOut, code = runVerb(t, newExecCmd, append(s, id, "-c", "1/0")...)
	if code != 1 || !strings.Contains(errOut, "ZeroDivisionError") {
		t.Fatalf("exec of a failing cell: %d %q %q", code, out, errOut)
	}
	out, _, code = runVerb(t, newExecCmd, append(s, id, "--json", "-c", "3")...)
	var rep api.CellReply
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || *rep.Cell.Result != "3" {
		t.Fatalf("exec --json: %d %q", code, out)
	}
	out, errOut, code = runVerb(t, newExecCmd, append(s, id, "--budget", "200ms", "-c", "print('partial', flush=True)\nimport time\ntime.sleep(60)")...)
	if code != 3 || !strings.Contains(errOut, "backgrounded: job "+id+"/j5") {
		t.Fatalf("exec backgrounded: %d %q %q", code, out, errOut)
	}
	out, _, code = runVerb(t, newJobsCmd, append(s, id)...)
	if code != 0 || !strings.Contains(out, id+"/j5") || !strings.Contains(out, "running") {
		t.Fatalf("jobs: %d %q", code, out)
	}
	out, errOut, code = runVerb(t, newLogsCmd, append(s, id+"/j5")...)
	if code != 0 || out != "partial\n" {
		t.Fatalf("logs: %d %q %q", code, out, errOut)
	}
	// j5 is a cell: stopping it interrupts the cell and its kernel lives on.
	out, errOut, code = runVerb(t, newStopCmd, append(s, id+"/j5")...)
	if code != 0 || !strings.Contains(out, "interrupted") || strings.Contains(out, "killed") {
		t.Fatalf("stop: %d %q %q", code, out, errOut)
	}
	_, errOut, code = runVerb(t, newStopCmd, append(s, id+"/j99")...)
	if code != 1 || !strings.Contains(errOut, "not_found") {
		t.Fatalf("stop of a missing job: %d %q", code, errOut)
	}
	out, _, code = runVerb(t, newPsCmd, append(s, "--json")...)
	var l api.SessionList
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil || len(l.Sessions) != 1 || l.Sessions[0].ID != id {
		t.Fatalf("ps --json: %d %q", code, out)
	}
	out, _, code = runVerb(t, newPsCmd, s...)
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, dir) {
		t.Fatalf("ps: %d %q", code, out)
	}
	out, _, code = runVerb(t, newRmCmd, append(s, id)...)
	if code != 0 || strings.TrimSpace(out) != id {
		t.Fatalf("rm: %d %q", code, out)
	}
	_, errOut, code = runVerb(t, newRmCmd, append(s, id)...)
	if code != 1 || !strings.Contains(errOut, "not_found") {
		t.Fatalf("rm again: %d %q", code, errOut)
	}
	out, _, code = runVerb(t, newRmCmd, append(s, id, "--json")...)
	var rms []struct {
		ID      string     `json:"id"`
		Removed bool       `json:"removed"`
		Error   *api.Error `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &rms); code != 1 || err != nil || len(rms) != 1 || rms[0].Removed ||
		rms[0].Error == nil || rms[0].Error.Code != api.CodeNotFound {
		t.Fatalf("rm --json again: %d %q %v", code, out, err)
	}
	_, errOut, code = runVerb(t, newCreateCmd, append(s, "-C", filepath.Join(dir, "gone"))...)
	if code != 1 || !strings.Contains(errOut, "working directory is gone") {
		t.Fatalf("create in a missing dir: %d %q", code, errOut)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	done <- nil
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left after the daemon stopped: %v", err)
	}
}
