package kernelstart

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/internal/procfs"
	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/link"
	"github.com/kennel-dev/kennel/transports"
)

// bridge runs the bridge program with args and stdin, and returns what it wrote.
func bridge(t *testing.T, python string, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(python, append([]string{"-I", "-S", "-c", bridgeProgram}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatal(err)
		}
		code = ee.ExitCode()
	}
	return out.String(), errb.String(), code
}

// A run directory with no kernel in it (none at all, no socket, or a socket left by a
// killed kernel, which nobody listens on) is exit status 3 before any byte on stdout,
// with the reason on stderr.
func TestAttachWhereNoKernelIsThereExits3(t *testing.T) {
	python := testneed.Python(t)
	tmp := t.TempDir()
	empty := filepath.Join(tmp, "empty")
	stale := filepath.Join(tmp, "stale")
	for _, d := range []string{empty, stale} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("unix", filepath.Join(stale, "kernel.sock"))
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	for _, dir := range []string{filepath.Join(tmp, "missing"), empty, stale, filepath.Join(tmp, "missing", "deeper")} {
		out, stderr, code := bridge(t, python, "", "attach", dir)
		if code != BridgeGone || out != "" || !strings.Contains(stderr, "no kernel") {
			t.Errorf("attach %s: exit %d, stdout %q, stderr %q; want exit 3, no stdout, a reason", dir, code, out, stderr)
		}
	}
	// The error a transport makes of it is "no kernel there", link.ErrGone.
	err = &BridgeError{Action: "attach", Code: BridgeGone}
	if !errors.Is(err, link.ErrGone) || !errdefs.IsNotFound(err) || !NoKernel(err) {
		t.Errorf("%v: want link.ErrGone, errdefs.ErrNotFound and NoKernel", err)
	}
	if err := (&BridgeError{Action: "attach", Code: BridgeGone, Wrote: true}); errors.Is(err, link.ErrGone) || NoKernel(err) {
		t.Errorf("%v: a bridge that wrote something first proves nothing", err)
	}
	if err := (&BridgeError{Action: "start", Code: BridgeGone}); errors.Is(err, link.ErrGone) || NoKernel(err) {
		t.Errorf("%v: a start's 3 is a kernel that did not start, not one gone", err)
	}
	if err := (&BridgeError{Action: "attach", Code: 127}); !errors.Is(err, transports.ErrUnavailable) {
		t.Errorf("%v: want transports.ErrUnavailable", err)
	}
}

// Connected, the bridge writes the ready line, then carries bytes both ways until its
// stdin ends (then it exits 0); a socket path over sun_path's limit is reached through
// its directory.
func TestAttachRelaysBothWays(t *testing.T) {
	python := testneed.Python(t)
	deep := t.TempDir()
	for len(deep) < 120 {
		deep = filepath.Join(deep, "a-rather-long-directory-name")
	}
	for _, dir := range []string{t.TempDir(), deep} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		// A listener bound by its relative name (as the stub binds), so a deep path works.
		srv := exec.Command(python, "-I", "-S", "-c", `
import os, socket, sys
os.chdir(sys.argv[1])
s = socket.socket(socket.AF_UNIX)
s.bind("kernel.sock")
s.listen(1)
print("up", flush=True)
c, _ = s.accept()
data = b""
while not data.endswith(b"\n"):
    data += c.recv(100)
c.sendall(b"echo " + data)
while c.recv(100):
    pass
print("closed", flush=True)
`, dir)
		srvOut, err := srv.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewReader(srvOut)
		if up, err := lines.ReadString('\n'); up != "up\n" {
			t.Fatalf("listener: %q, %v", up, err)
		}
		cmd := exec.Command(python, "-I", "-S", "-c", bridgeProgram, "attach", dir)
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(out)
		if ready, err := r.ReadString('\n'); ready != BridgeReady {
			t.Fatalf("%d-byte path: first line %q, %v; want %q", len(dir), ready, err, BridgeReady)
		}
		if _, err := io.WriteString(in, "ping\n"); err != nil {
			t.Fatal(err)
		}
		if got, err := r.ReadString('\n'); got != "echo ping\n" {
			t.Fatalf("relayed %q, %v", got, err)
		}
		in.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("bridge after its stdin ended: %v, want exit 0", err)
		}
		if closed, _ := lines.ReadString('\n'); closed != "closed\n" {
			t.Errorf("the listener's connection did not end with the bridge: %q", closed)
		}
		_ = srv.Wait()
	}
}

// startGroup starts a sleeper leading a process group of its own and returns its pid
// and start time.
func startGroup(t *testing.T) (*exec.Cmd, uint64) {
	t.Helper()
	cmd := exec.Command("sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	st, err := procfs.Read(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd, st.Start
}

// signal checks the pid, group and start time before it signals: a mismatch is exit 3
// and signals nothing; a kernel recorded in another pid namespace is exit 4; otherwise
// the group gets the signal.
func TestSignalChecksTheLeaderFirst(t *testing.T) {
	python := testneed.Python(t)
	run := t.TempDir()
	cmd, start := startGroup(t)
	pid := strconv.Itoa(cmd.Process.Pid)
	for _, args := range [][]string{
		{pid, pid, strconv.FormatUint(start+1, 10)}, // a later process on the pid
		{pid, "1234567", strconv.FormatUint(start, 10)},
		{"999999999", "999999999", "1"},
		{"1", "1", "1"},
	} {
		_, stderr, code := bridge(t, python, "", append(append([]string{"signal", run}, args...), "KILL")...)
		if code != BridgeGone {
			t.Errorf("signal %v: exit %d (%s), want 3", args, code, stderr)
		}
	}
	if err := os.WriteFile(filepath.Join(run, "pid"), []byte(pid+" "+strconv.FormatUint(start, 10)+" pid:[1]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := bridge(t, python, "", "signal", run, pid, pid, strconv.FormatUint(start, 10), "KILL"); code != BridgeOtherNamespace || !strings.Contains(stderr, "pid namespace") {
		t.Errorf("signal with the kernel in another pid namespace: exit %d (%s), want 4", code, stderr)
	}
	if st, err := procfs.Read(cmd.Process.Pid); err != nil || st.Zombie() {
		t.Fatalf("the sleeper did not survive the refused signals: %v", err)
	}
	ns, _ := os.Readlink("/proc/self/ns/pid")
	if err := os.WriteFile(filepath.Join(run, "pid"), []byte(pid+" "+strconv.FormatUint(start, 10)+" "+ns+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := bridge(t, python, "", "signal", run, pid, pid, strconv.FormatUint(start, 10), "TERM"); code != 0 {
		t.Fatalf("signal TERM: exit %d (%s)", code, stderr)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Fatalf("the sleeper's end: %v, want SIGTERM", err)
	}
}

// KILL ends the leader and everything below it, also what left its group.
func TestSignalKillEndsWhatIsBelowTheKernel(t *testing.T) {
	python := testneed.Python(t)
	cmd := exec.Command("sh", "-c", `setsid sleep 1000 & sleep 1000 & echo $!; wait`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }()
	_, _ = bufio.NewReader(out).ReadString('\n')
	st, err := procfs.Read(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	var below []procfs.Stat
	for deadline := time.Now().Add(10 * time.Second); len(below) < 2 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		below = nil
		all, _ := procfs.All()
		for _, p := range all {
			if p.PPID == cmd.Process.Pid && !p.Zombie() {
				below = append(below, p)
			}
		}
	}
	if len(below) < 2 {
		t.Fatalf("sleepers below the shell: %v", below)
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	if _, stderr, code := bridge(t, python, "", "signal", t.TempDir(), pid, pid, strconv.FormatUint(st.Start, 10), "KILL"); code != 0 {
		t.Fatalf("signal KILL: exit %d (%s)", code, stderr)
	}
	for _, p := range below {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			now, err := procfs.Read(p.PID)
			if err != nil || now.Start != p.Start || now.Zombie() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("process %d below the kernel outlived the KILL", p.PID)
			}
		}
	}
}

// cleanup removes a run directory and says whether the kernel had left its socket;
// anything that is not a run directory is left as it is.
func TestCleanupRemovesOnlyARunDirectory(t *testing.T) {
	python := testneed.Python(t)
	tmp := t.TempDir()
	mk := func(name string, mode os.FileMode, files ...string) string {
		dir := filepath.Join(tmp, name)
		if err := os.Mkdir(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	for _, c := range []struct {
		dir, out string
	}{
		{mk("killed", 0o700, "kernel.sock", "kernel.log", "pid"), "killed\n"},
		{mk("ended", 0o700, "kernel.log", "pid"), "ended\n"},
		{filepath.Join(tmp, "never"), ""},
	} {
		out, stderr, code := bridge(t, python, "", "cleanup", c.dir)
		if code != 0 || out != c.out {
			t.Errorf("cleanup %s: exit %d, %q (%s); want 0, %q", c.dir, code, out, stderr, c.out)
		}
		if _, err := os.Stat(c.dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there: %v", c.dir, err)
		}
	}
	for _, dir := range []string{mk("other", 0o700, "kernel.log", "notes.txt"), mk("open", 0o755, "kernel.log")} {
		if _, stderr, code := bridge(t, python, "", "cleanup", dir); code != 1 || !strings.Contains(stderr, "left as it is") {
			t.Errorf("cleanup %s: exit %d (%s), want 1", dir, code, stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "kernel.log")); err != nil {
			t.Errorf("%s was touched: %v", dir, err)
		}
	}
}

// A bridge program with no action, or an unknown one, says how it is used.
func TestBridgeUsage(t *testing.T) {
	python := testneed.Python(t)
	for _, args := range [][]string{nil, {"launch"}, {"attach"}, {"signal", "/r", "1"}} {
		if _, stderr, code := bridge(t, python, "", args...); code != 1 || !strings.Contains(stderr, "usage") {
			t.Errorf("%q: exit %d (%s), want 1 and the usage", args, code, stderr)
		}
	}
}
