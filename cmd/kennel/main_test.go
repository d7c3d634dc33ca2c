package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/fakekernel"
	"github.com/kennel-dev/kennel/internal/reaper"
	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/transports/containerd/containerdtest"
	"github.com/kennel-dev/kennel/transports/ssh/sshtest"

	"github.com/kennel-dev/kennel/settings"
)

// envRunMain makes the test binary run kennel's main: the tests exec it as the real
// command, with real signals and exit codes.
const envRunMain = "KENNEL_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if reaper.Main() || fakekernel.Main() {
		return
	}
	if os.Getenv(envRunMain) == "1" {
		os.Args = append([]string{"kennel"}, os.Args[1:]...)
		main()
		return
	}
	os.Exit(containerdtest.Main(m)) // m.Run, then the test containerd (if one started) stopped
}

// kennelCmd returns the test binary set up to run as `kennel args...` in dir.
func kennelCmd(t *testing.T, dir string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), envRunMain+"=1", "XDG_CACHE_HOME="+filepath.Join(t.TempDir(), "cache"))
	return cmd
}

// runKennel runs kennel to its end and returns stdout, stderr and the exit code.
func runKennel(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := kennelCmd(t, t.TempDir(), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Stdin = strings.NewReader(stdin)
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// TestRunAppliesTheTruncationAndLogLevelSettings: a global truncation setting bounds a
// --sh job's output (--no-truncate still prints every byte), and a logLevel setting of
// "debug" logs what --debug would.
func TestRunAppliesTheTruncationAndLogLevelSettings(t *testing.T) {
	global := filepath.Join(t.TempDir(), "config")
	t.Setenv(settings.EnvConfigDir, global)
	if err := os.MkdirAll(global, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(doc string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(global, "settings.json"), []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"truncation": {"lines": 10}}`)
	out, errOut, code := runKennel(t, "", "run", "--sh", "seq 1 100")
	if code != 0 || out != "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n" || !strings.Contains(errOut, "(90 lines)") {
		t.Fatalf("truncation {lines: 10}: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if out, _, code = runKennel(t, "", "run", "--sh", "seq 1 100", "--no-truncate"); code != 0 || strings.Count(out, "\n") != 100 {
		t.Fatalf("--no-truncate over the setting: exit %d, %d lines", code, strings.Count(out, "\n"))
	}
	_, quiet, _ := runKennel(t, "", "run", "-c", "1")
	_, debug, _ := runKennel(t, "", "run", "-c", "1", "--debug")
	write(`{"logLevel": "debug"}`)
	_, set, code := runKennel(t, "", "run", "-c", "1")
	if code != 0 || strings.Contains(quiet, "level=DEBUG") || !strings.Contains(debug, "level=DEBUG") || !strings.Contains(set, "level=DEBUG") {
		t.Fatalf("logLevel debug: exit %d; stderr without %q, with --debug %q, with the setting %q", code, quiet, debug, set)
	}
}

func TestRunPrintsWhatCellsPrintAndTheirLastValue(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"two -c cells share a namespace", "", []string{"run", "-c", "x = 6*7", "-c", "print(x)"}, "42\n"},
		{"a final expression is printed", "", []string{"run", "-c", "6*7"}, "42\n"},
		{"cells from stdin split at # %%", "a = 1\n# %%\nprint(a + 1)\n", []string{"run", "-"}, "2\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runKennel(t, tc.stdin, tc.args...)
			if code != 0 || out != tc.want {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %q", code, out, errOut, tc.want)
			}
		})
	}
}

func TestAFailingCellPrintsItsTracebackAndExits1(t *testing.T) {
	out, errOut, code := runKennel(t, "", "run", "-c", "print('before')", "-c", "def f():\n    raise ValueError('bad value')\nf()", "-c", "print('never')")
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if out != "before\n" {
		t.Fatalf("stdout %q: a later cell ran or output was lost", out)
	}
	for _, want := range []string{"Traceback (most recent call last):", "f()", "ValueError: bad value"} {
		if !strings.Contains(errOut, want) {
			t.Fatalf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	_, errOut, code := runKennel(t, "", "run")
	if code != 2 || !strings.Contains(errOut, "nothing to run") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
}

// TestSIGINTInterruptsTheCellAndEndsCleanly is Ctrl-C: the cell gets KeyboardInterrupt,
// kennel exits 130, and no kernel process is left.
func TestSIGINTInterruptsTheCellAndEndsCleanly(t *testing.T) {
	dir := t.TempDir()
	marker := fmt.Sprintf("kennel-sigint-%d", time.Now().UnixNano())
	cmd := kennelCmd(t, dir, "run", "-c", "import os, time\nprint(os.getpid(), flush=True)\n"+
		"try:\n    while True: time.sleep(0.01)\nexcept KeyboardInterrupt:\n    print('"+marker+"', flush=True)\n    raise")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	buf := make([]byte, 64)
	n, _ := stdout.Read(buf)
	if _, err := fmt.Sscan(string(buf[:n]), &pid); err != nil || pid == 0 {
		t.Fatalf("no kernel pid printed: %q (%v)", buf[:n], err)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	rest := new(bytes.Buffer)
	_, _ = rest.ReadFrom(stdout)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		t.Fatal("kennel did not end after SIGINT")
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("exit: %v, want 130; stderr %q", err, errb.String())
	}
	if !strings.Contains(rest.String(), marker) {
		t.Fatalf("the cell saw no KeyboardInterrupt: stdout %q", rest.String())
	}
	if !strings.Contains(errb.String(), "KeyboardInterrupt") {
		t.Fatalf("stderr %q does not say the cell was interrupted", errb.String())
	}
	if err := testproc.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("kernel %d still alive after kennel exited", pid)
	}
}

func TestVersionNamesProtocolAndBundle(t *testing.T) {
	out, _, code := runKennel(t, "", "version")
	if code != 0 || !strings.Contains(out, "protocol 1") || !strings.Contains(out, "stub bundle ") {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
}

// TestRunOverSSH runs `kennel run --ssh` against a real sshd on loopback: the cell runs on
// the "remote" host in its home, and kennel.fs.* reaches the remote files over SFTP, with
// escapes refused.
func TestRunOverSSH(t *testing.T) {
	srv := sshtest.Start(t)
	home := sshHome(t, srv)
	if err := os.WriteFile(filepath.Join(srv.Home, "remote.txt"), []byte("on the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := kennelCmd(t, t.TempDir(), "run", "--ssh", sshtest.Alias,
		"-c", "import os, kennel\nprint(os.getcwd())",
		"-c", "print(kennel.fs.read('remote.txt')['content'], end='')",
		"-c", "try:\n    kennel.fs.read('/etc/passwd')\nexcept kennel.HostError as e:\n    print(e.code)")
	cmd.Env = append(cmd.Env, "HOME="+home, "SSH_AUTH_SOCK=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("kennel run --ssh: %v\nstderr: %s", err, errb.String())
	}
	want := srv.Home + "\non the host\noutside\n"
	if out.String() != want {
		t.Fatalf("stdout %q, want %q (stderr %s)", out.String(), want, errb.String())
	}
}

// TestRunShBoundsTheJobAndSaysWhatItDropped: `kennel run --sh` prints the job's output
// within the default limits (2000 lines), a notice on stderr that counts every dropped
// byte and line and names the full output, which holds every byte; --no-truncate prints
// everything; the job's exit code is kennel's.
func TestRunShBoundsTheJobAndSaysWhatItDropped(t *testing.T) {
	want, err := exec.Command("seq", "1", "100000").Output()
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runKennel(t, "", "run", "--sh", "seq 1 100000")
	lines := strings.Count(out, "\n")
	if code != 0 || lines != 2000 || !strings.HasPrefix(string(want), out) {
		t.Fatalf("exit %d, %d lines printed; stderr %q", code, lines, errOut)
	}
	dropped := fmt.Sprintf("dropped %d bytes (%d lines)", len(want)-len(out), 100000-2000)
	if !strings.Contains(errOut, dropped) {
		t.Fatalf("notice %q does not say %q", errOut, dropped)
	}
	i := strings.Index(errOut, "full output: ")
	if i < 0 {
		t.Fatalf("notice %q names no full output", errOut)
	}
	full, err := os.ReadFile(strings.TrimRight(strings.Fields(errOut[i+len("full output: "):])[0], "]"))
	if err != nil || !bytes.Equal(full, want) {
		t.Fatalf("full output: %d bytes, %v; want %d bytes", len(full), err, len(want))
	}
	out, _, code = runKennel(t, "", "run", "--sh", "seq 1 100000", "--no-truncate")
	if code != 0 || out != string(want) {
		t.Fatalf("--no-truncate: exit %d, %d bytes", code, len(out))
	}
	if _, _, code = runKennel(t, "", "run", "--sh", "exit 3"); code != 3 {
		t.Fatalf("exit %d, want the job's 3", code)
	}
}
