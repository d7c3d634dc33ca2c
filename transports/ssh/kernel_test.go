package ssh_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/ssh"
	"github.com/kennel-dev/kennel/transports/ssh/sshtest"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

func TestStageTwiceSendsOnce(t *testing.T) {
	srv := sshtest.Start(t)
	h := newHosts(t, srv)
	b, _ := images.Stub()
	r, err := h.Stage(testCtx(t), sshtest.Alias)
	if err != nil || !r.Sent || r.Dir != srv.Home+"/.kennel-remote/"+b.Hash() {
		t.Fatalf("first staging: %+v, %v", r, err)
	}
	if r, err := h.Stage(testCtx(t), sshtest.Alias); err != nil || r.Sent {
		t.Fatalf("second staging: %+v, %v; want nothing sent", r, err)
	}
	// A new controller (cold cache) learns from the probe that it is staged.
	h2 := newHosts(t, srv)
	if p := h2.Probe(testCtx(t), sshtest.Alias); !p.Staged {
		t.Fatalf("probe after staging: %+v", p)
	}
	if r, err := h2.Stage(testCtx(t), sshtest.Alias); err != nil || r.Sent {
		t.Fatalf("staging from a cold cache: %+v, %v; want nothing sent", r, err)
	}
	for _, f := range b.Files() {
		got, err := os.ReadFile(r.Dir + "/" + f.Path)
		if err != nil || string(got) != string(f.Data) {
			t.Fatalf("staged %s: %v", f.Path, err)
		}
	}
}

// A staging whose connection drops half-way leaves no bundle directory in place; the
// next staging sends it whole.
func TestKilledStagingLeavesNoHalfBundle(t *testing.T) {
	srv := sshtest.Start(t)
	h := newHosts(t, srv)
	b, _ := images.Stub()
	c, _, err := h.Client(testCtx(t), sshtest.Alias)
	if err != nil {
		t.Fatal(err)
	}
	p := h.Probe(testCtx(t), sshtest.Alias)
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	in, _ := sess.StdinPipe()
	if err := sess.Start(ssh.StageCommand()); err != nil {
		t.Fatal(err)
	}
	tarball, err := ssh.BundleTar(b)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(in, p.PythonPath+"\n"+b.Hash()+"\n")
	in.Write(tarball[:len(tarball)/2])
	// Wait until the half is unpacked in a temporary directory, then drop everything.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(srv.Run(t, "ls -a ~/.kennel-remote 2>/dev/null"), ".stage-") {
		if time.Now().After(deadline) {
			t.Fatal("staging never started unpacking")
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.Drop(sshtest.Alias)
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(srv.Home + "/.kennel-remote/" + b.Hash()); !os.IsNotExist(err) {
		t.Fatalf("a half bundle is in place: %v", err)
	}
	if p := newHosts(t, srv).Probe(testCtx(t), sshtest.Alias); p.Staged {
		t.Fatal("probe reports a half staging as staged")
	}
	r, err := newHosts(t, srv).Stage(testCtx(t), sshtest.Alias)
	if err != nil || !r.Sent {
		t.Fatalf("staging after a killed one: %+v, %v", r, err)
	}
}

// startKernel starts a kernel on the test server's host in dir and reads its hello.
func startKernel(t *testing.T, h *ssh.Hosts, dir string) (transports.Kernel, *transporttest.Client) {
	t.Helper()
	tr := ssh.New(h, ssh.Options{Target: sshtest.Alias, StdinGrace: 500 * time.Millisecond, TermGrace: 500 * time.Millisecond})
	return transporttest.Start(t, tr, transports.Spec{SessionID: t.Name(), Dir: dir})
}

// The login profile prints a banner on stdout; the first line the controller reads is
// still the hello, and the banner went to stderr.
func TestBannerDoesNotDisturbFrames(t *testing.T) {
	srv := sshtest.Start(t)
	if !strings.Contains(srv.RawRun(t, "true"), sshtest.Banner) {
		t.Fatal("the test profile prints no banner on a plain ssh command's stdout")
	}
	h := newHosts(t, srv)
	_, c := startKernel(t, h, "/") // the hello is the first line, a well-formed frame
	done, _, err := c.Execute("import os\nos.environ['HOME']")
	if err != nil || done.Str("result") != "'"+srv.Home+"'" {
		t.Fatalf("done %s, %v", done.Raw, err)
	}
}

// A kill leaves no process of the kernel, its cells' children or its jobs on the host
// (ps over ssh), and removes the run directory.
func TestKillLeavesNoRemoteProcess(t *testing.T) {
	srv := sshtest.Start(t)
	h := newHosts(t, srv)
	k, c := startKernel(t, h, "/")
	mark := "4242.17" + strings.TrimLeft(itoa(int(time.Now().UnixNano()%1000000)), "0")
	if err := c.Job("sleep " + mark + "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(`import subprocess
subprocess.Popen(["sleep", "` + mark + `2"])
subprocess.Popen(["sleep", "` + mark + `3"], start_new_session=True)
subprocess.run(["sh", "-c", "sleep ` + mark + `4 >/dev/null 2>&1 &"])
`); err != nil {
		t.Fatal(err)
	}
	// A busy kernel: the ladder has to go past stdin EOF.
	if _, err := c.Send("while True: pass"); err != nil {
		t.Fatal(err)
	}
	before := srv.Run(t, "ps -eo args")
	for i := 1; i <= 4; i++ {
		if !strings.Contains(before, "sleep "+mark+itoa(i)) {
			t.Fatalf("sleeper %d is not running before the kill:\n%s", i, before)
		}
	}
	runDir := k.Info().ID[strings.Index(k.Info().ID, ":/")+1:]
	marker := []byte("KENNEL_REMOTE_RUN=" + filepath.Base(runDir) + "\x00")
	if n := countEnv(marker); n < 4 {
		t.Fatalf("%d processes carry the run's marker before the kill, want the 4 sleepers at least", n)
	}
	if _, err := os.Stat(runDir); err != nil {
		t.Fatalf("run directory: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := k.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if e, err := k.Wait(); err != nil || !e.Killed {
		t.Fatalf("wait: %+v, %v", e, err)
	}
	ps := srv.Run(t, "ps -eo pid,args")
	if strings.Contains(ps, "sleep "+mark) {
		t.Fatalf("processes outlived the kill:\n%s", ps)
	}
	// Only this run's processes count (other tests run local kernels on this machine,
	// which is also the "remote" host): the kernel and everything it started carry the
	// run's marker variable.
	if n := countEnv(marker); n != 0 {
		t.Fatalf("%d processes of the killed kernel outlived the kill", n)
	}
	if _, err := os.Stat(runDir); !os.IsNotExist(err) {
		t.Fatalf("run directory %s after the kill: %v", runDir, err)
	}
}

// countEnv counts the live processes whose environment holds entry.
func countEnv(entry []byte) int {
	n := 0
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, env := range procs {
		if b, err := os.ReadFile(env); err == nil && bytes.Contains(b, entry) {
			n++
		}
	}
	return n
}
