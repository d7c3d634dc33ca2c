package ssh_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/ssh"
	"github.com/kennel-dev/kennel/transports/ssh/sshtest"
)

// The two benchmarks below are issue 8's start-up comparison, run as siblings so one run
// gives both (compare their medians; the target is a ratio of at most 1.0):
//
//   - BenchmarkSSHStartToHello: Transport.Start to the kernel's hello frame over a warm
//     connection (the Hosts already connected, the probe cached, the bundle staged).
//   - BenchmarkOpenSSHMasterPythonPass: `ssh -o ControlPath=SOCK host python3 -c pass`
//     over a warm OpenSSH master (ssh -M started once), to the command's exit.
//
// Both run the same remote interpreter: the baseline's `python3` (sshd's PATH) must be
// the probe's python3 (the login shell's PATH), which the baseline checks before timing.

// BenchmarkSSHStartToHello times Start to the hello frame of a remote kernel over a warm
// connection. Each kernel is killed and waited for with the timer stopped.
func BenchmarkSSHStartToHello(b *testing.B) {
	srv := sshtest.Start(b)
	hosts := newHosts(b, srv)
	ctx := benchCtx(b)
	if p := hosts.Probe(ctx, sshtest.Alias); p.Status != ssh.StatusReady {
		b.Fatalf("probe: %s: %v", p.Status, p.Err)
	}
	if _, err := hosts.Stage(ctx, sshtest.Alias); err != nil {
		b.Fatalf("stage: %v", err)
	}
	tr := ssh.New(hosts, ssh.Options{Target: sshtest.Alias})
	dir := b.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	spec := transports.Spec{SessionID: "bench", Dir: dir}

	// One kernel before timing: the connection, probe and staging are warm from here on.
	startToHello(b, ctx, tr, spec)
	conns := srv.Connections()

	b.ResetTimer()
	for range b.N {
		startToHello(b, ctx, tr, spec)
	}
	b.StopTimer()
	if got := srv.Connections(); got != conns {
		b.Fatalf("%d new connections during the timed loop: the connection was not warm", got-conns)
	}
}

// startToHello starts a kernel and reads its hello (timed), then kills it and waits for
// its end and the host's sweep (not timed).
func startToHello(b *testing.B, ctx context.Context, tr transports.Transport, spec transports.Spec) {
	b.Helper()
	stderr := &lockedBuffer{}
	spec.Stderr = stderr
	k, err := tr.Start(ctx, spec)
	if err != nil {
		b.Fatalf("start: %v", err)
	}
	line, err := bufio.NewReader(k.Stdout()).ReadBytes('\n')
	b.StopTimer()
	defer b.StartTimer()
	var hello struct {
		Event string `json:"event"`
		ID    string `json:"id"`
	}
	if err != nil || json.Unmarshal(line, &hello) != nil || hello.Event != "hello" || hello.ID != "" {
		b.Errorf("first frame %q (%v): want a hello; stderr:\n%s", line, err, stderr.String())
	}
	if err := k.Kill(ctx); err != nil {
		b.Fatalf("kill: %v", err)
	}
	if _, err := k.Wait(); err != nil {
		b.Fatalf("wait: %v", err)
	}
	if b.Failed() {
		b.FailNow()
	}
}

// BenchmarkOpenSSHMasterPythonPass is the baseline: each iteration runs
// `ssh -o ControlPath=SOCK ... host python3 -c pass` over an OpenSSH master started once
// (ssh -M -N -f, ControlPersist), to the command's exit.
func BenchmarkOpenSSHMasterPythonPass(b *testing.B) {
	srv := sshtest.Start(b)
	// A socket path must stay short (sun_path holds ~108 bytes): not under b.TempDir().
	sockDir, err := os.MkdirTemp("", "kennel-cm-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "s")
	args := append([]string{"-o", "ControlPath=" + sock}, srv.SSHArgs()...)
	ctx := benchCtx(b)

	// The master forks into the background once authenticated; its output goes to a file
	// (a pipe would keep Run waiting for the background process).
	logFile, err := os.Create(filepath.Join(sockDir, "master.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logFile.Close()
	master := exec.CommandContext(ctx, "ssh", append(append([]string{"-M", "-N", "-f", "-o", "ControlPersist=60"}, args...), sshtest.Alias)...)
	master.Stdout, master.Stderr = logFile, logFile
	if err := master.Run(); err != nil {
		log, _ := os.ReadFile(logFile.Name())
		b.Fatalf("ssh master: %v: %s", err, log)
	}
	b.Cleanup(func() {
		_ = exec.Command("ssh", append(append([]string{"-O", "exit"}, args...), sshtest.Alias)...).Run()
	})
	if out, err := exec.CommandContext(ctx, "ssh", append(append([]string{"-O", "check"}, args...), sshtest.Alias)...).CombinedOutput(); err != nil {
		b.Fatalf("ssh -O check: %v: %s", err, out)
	}

	// The same remote interpreter as the kernel's: the probe's python3.
	hosts := newHosts(b, srv)
	p := hosts.Probe(ctx, sshtest.Alias)
	if p.Status != ssh.StatusReady {
		b.Fatalf("probe: %s: %v", p.Status, p.Err)
	}
	exe := strings.TrimSpace(sshOut(b, ctx, args, "python3 -c 'import sys; print(sys.executable)'"))
	if exe != p.PythonPath {
		b.Fatalf("ssh's python3 is %q, the probe's %q: not the same interpreter", exe, p.PythonPath)
	}
	hosts.Close()

	pass := append(append([]string{}, args...), sshtest.Alias, "python3 -c pass")
	run := func() {
		cmd := exec.CommandContext(ctx, "ssh", pass...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			b.Fatalf("ssh python3 -c pass: %v: %s", err, stderr.String())
		}
	}
	run()
	conns := srv.Connections()

	b.ResetTimer()
	for range b.N {
		run()
	}
	b.StopTimer()
	if got := srv.Connections(); got != conns {
		b.Fatalf("%d new connections during the timed loop: the master was not used", got-conns)
	}
}

// sshOut runs command over the master and returns its stdout with the banner lines
// removed.
func sshOut(b *testing.B, ctx context.Context, args []string, command string) string {
	b.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "ssh", append(append([]string{}, args...), sshtest.Alias, command)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("ssh %q: %v: %s", command, err, stderr.String())
	}
	var out strings.Builder
	for line := range strings.Lines(stdout.String()) {
		if !strings.Contains(line, sshtest.Banner) {
			out.WriteString(line)
		}
	}
	return out.String()
}

// lockedBuffer is a bytes.Buffer safe for the session's stderr copier and the reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// benchCtx bounds one benchmark run (setup and every iteration).
func benchCtx(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	b.Cleanup(cancel)
	return ctx
}
