package ssh_test

import (
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/ssh"
	"github.com/kennel-dev/kennel/transports/ssh/sshtest"
)

func TestProbeReportsFacts(t *testing.T) {
	srv := sshtest.Start(t)
	h := newHosts(t, srv)
	p := h.Probe(testCtx(t), sshtest.Alias)
	if p.Status != ssh.StatusReady {
		t.Fatalf("probe: %+v", p)
	}
	if p.OS != "Linux" || p.Arch != strings.TrimSpace(srv.Run(t, "uname -m")) {
		t.Errorf("os %q arch %q", p.OS, p.Arch)
	}
	if p.Home != srv.Home {
		t.Errorf("home %q, want %q", p.Home, srv.Home)
	}
	if p.Cores != runtime.NumCPU() {
		t.Errorf("cores %d, want %d", p.Cores, runtime.NumCPU())
	}
	want := strings.TrimSpace(srv.Run(t, `python3 -c 'import sys;print("%d.%d.%d" % sys.version_info[:3])'`))
	if p.Python != want || !strings.HasPrefix(p.PythonPath, "/") {
		t.Errorf("python %q at %q, want %q", p.Python, p.PythonPath, want)
	}
	if p.Staged {
		t.Errorf("a fresh home reports the bundle staged")
	}
	if p.Target != "root@kennel-test:"+itoa(srv.Port) {
		t.Errorf("target %q", p.Target)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestProbeUnauthorizedKeyNeedsAuth(t *testing.T) {
	srv := sshtest.Start(t)
	cfg := srv.Dir + "/other_config"
	if err := os.WriteFile(cfg, []byte("Host other\n  HostName 127.0.0.1\n  Port "+itoa(srv.Port)+"\n  User root\n  IdentityFile "+srv.OtherKeyFile+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := ssh.NewHosts(ssh.HostsOptions{ConfigFile: cfg, KnownHosts: srv.KnownHosts, AgentSocket: "none"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	p := h.Probe(testCtx(t), "other")
	if p.Status != ssh.StatusNeedsAuth || !errors.Is(p.Err, ssh.ErrNeedsAuth) || !errors.Is(p.Err, transports.ErrUnavailable) {
		t.Fatalf("probe with a key the server refuses: %+v", p)
	}
	if !strings.Contains(p.Hint, "refused") {
		t.Errorf("hint %q does not say the key was refused", p.Hint)
	}
}

func TestProbeClosedPortUnreachable(t *testing.T) {
	srv := sshtest.Start(t)
	h := newHosts(t, srv)
	port := closedPort(t)
	p := h.Probe(testCtx(t), "root@127.0.0.1:"+itoa(port))
	if p.Status != ssh.StatusUnreachable || !errors.Is(p.Err, ssh.ErrUnreachable) {
		t.Fatalf("probe of a closed port: %+v", p)
	}
}

func TestProbeChangedHostKeyRefused(t *testing.T) {
	srv := sshtest.Start(t)
	// known_hosts holds another key for the server's address.
	other, err := os.ReadFile(srv.OtherKeyFile + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(other))
	kh := srv.Dir + "/changed_known_hosts"
	if err := os.WriteFile(kh, []byte("[127.0.0.1]:"+itoa(srv.Port)+" "+f[0]+" "+f[1]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := ssh.NewHosts(ssh.HostsOptions{ConfigFile: srv.ConfigFile, KnownHosts: kh, AgentSocket: "none"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	p := h.Probe(testCtx(t), sshtest.Alias)
	if !errors.Is(p.Err, ssh.ErrHostKeyChanged) || p.Status != ssh.StatusNeedsAuth {
		t.Fatalf("probe with a changed host key: %+v", p)
	}
	if !strings.Contains(p.Hint, kh) || !strings.Contains(p.Hint, "known_hosts") || !strings.Contains(p.Hint, "ssh-keygen -R") {
		t.Errorf("hint %q does not name known_hosts and the fix", p.Hint)
	}
	// Nothing was added to or changed in the file.
	if b, _ := os.ReadFile(kh); strings.Count(string(b), "\n") != 1 {
		t.Errorf("known_hosts changed:\n%s", b)
	}
}

func TestUnknownHostKeyAcceptNewAndStrict(t *testing.T) {
	srv := sshtest.Start(t)
	kh := srv.Dir + "/fresh/known_hosts" // the directory does not exist yet
	strict, err := ssh.NewHosts(ssh.HostsOptions{ConfigFile: srv.ConfigFile, KnownHosts: kh, AgentSocket: "none", StrictHostKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	defer strict.Close()
	if p := strict.Probe(testCtx(t), sshtest.Alias); p.Status != ssh.StatusNeedsAuth {
		t.Fatalf("strict probe of an unknown host: %+v", p)
	}
	h, err := ssh.NewHosts(ssh.HostsOptions{ConfigFile: srv.ConfigFile, KnownHosts: kh, AgentSocket: "none"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if p := h.Probe(testCtx(t), sshtest.Alias); p.Status != ssh.StatusReady {
		t.Fatalf("accept-new probe of an unknown host: %+v", p)
	}
	b, err := os.ReadFile(kh)
	if err != nil || !strings.Contains(string(b), srv.HostKeyLine) || !strings.HasPrefix(string(b), "[127.0.0.1]:"+itoa(srv.Port)+" ") {
		t.Fatalf("known_hosts after accept-new: %q, %v", b, err)
	}
}

func TestConcurrentProbesOneConnection(t *testing.T) {
	srv := sshtest.Start(t)
	h := newHosts(t, srv)
	before := srv.Connections()
	var wg sync.WaitGroup
	probes := make([]ssh.Probe, 10)
	for i := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			probes[i] = h.Probe(testCtx(t), sshtest.Alias)
		}()
	}
	wg.Wait()
	for i, p := range probes {
		if p.Status != ssh.StatusReady {
			t.Errorf("probe %d: %+v", i, p)
		}
	}
	// Ten concurrent dials share one too.
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := h.Client(testCtx(t), "root@kennel-test"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := srv.Connections() - before; n != 1 {
		t.Errorf("10 concurrent probes and 10 dials made %d connections, want 1", n)
	}
}
