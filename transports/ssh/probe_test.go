package ssh_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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

// TestANeedsAuthHintSignsInWithDashP: the hint of a host that refuses every key names the
// command that signs in by hand as ssh reads it, "ssh -p PORT user@host", never
// "ssh user@host:PORT" (which ssh takes for a host named "host:PORT").
func TestANeedsAuthHintSignsInWithDashP(t *testing.T) {
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
	if p.Status != ssh.StatusNeedsAuth {
		t.Fatalf("probe with a key the server refuses: %+v", p)
	}
	t.Logf("hint: %s", p.Hint)
	if want := "ssh -p " + itoa(srv.Port) + " root@other"; !strings.Contains(p.Hint, want) {
		t.Errorf("hint %q does not name %q", p.Hint, want)
	}
	if bad := "root@other:" + itoa(srv.Port) + ")"; strings.Contains(p.Hint, "ssh "+bad) {
		t.Errorf("hint %q tells ssh to reach a host named %q", p.Hint, "other:"+itoa(srv.Port))
	}
}

// TestSignInIsACommandSshReads: SignIn names a port other than 22 with -p, none for 22
// or no port, quotes a destination a shell would split or expand, and is empty for a
// target that does not parse.
func TestSignInIsACommandSshReads(t *testing.T) {
	for _, c := range []struct{ target, want string }{
		{"root@host:2222", "ssh -p 2222 root@host"},
		{"root@host:22", "ssh root@host"},
		{"me@host", "ssh me@host"},
		{"host", "ssh host"},
		{"host:2200", "ssh -p 2200 host"},
		{"root@[::1]:2222", "ssh -p 2222 root@::1"},
		{"o'neil@host$x:2222", `ssh -p 2222 'o'\''neil@host$x'`},
		{"root@a;b", "ssh 'root@a;b'"},
		{"-oProxyCommand=x", ""},
		{"h:99999", ""},
		{"", ""},
	} {
		if got := ssh.SignIn(c.target); got != c.want {
			t.Errorf("SignIn(%q) = %q, want %q", c.target, got, c.want)
		}
	}
}

// TestCachedAnswersWhatAProbeFoundWithoutProbing: before any probe Cached holds nothing
// and reaches nowhere; after one it answers that probe for the target and for any other
// spelling that resolves to the same host (the ssh config's user, its port); a target
// that does not parse has nothing cached.
func TestCachedAnswersWhatAProbeFoundWithoutProbing(t *testing.T) {
	srv := sshtest.Start(t)
	h := newHosts(t, srv)
	before := srv.Connections()
	if p, ok := h.Cached(sshtest.Alias); ok {
		t.Fatalf("Cached before any probe: %+v", p)
	}
	if n := srv.Connections() - before; n != 0 {
		t.Fatalf("Cached made %d connections", n)
	}
	p := h.Probe(testCtx(t), sshtest.Alias)
	if p.Status != ssh.StatusReady {
		t.Fatalf("probe: %+v", p)
	}
	for _, target := range []string{sshtest.Alias, "root@" + sshtest.Alias, "root@" + sshtest.Alias + ":" + itoa(srv.Port)} {
		got, ok := h.Cached(target)
		if !ok || got.Status != ssh.StatusReady || got.At != p.At || got.Home != p.Home || got.Target != p.Target {
			t.Errorf("Cached(%q) = %+v, %v; want the probe %+v", target, got, ok, p)
		}
	}
	if got, ok := h.Cached("nobody@" + sshtest.Alias); ok {
		t.Errorf("Cached of another user: %+v", got)
	}
	if got, ok := h.Cached("-oProxyCommand=x"); ok {
		t.Errorf("Cached of a target that does not parse: %+v", got)
	}
	if n := srv.Connections() - before; n != 1 {
		t.Errorf("one probe and five Cached made %d connections, want 1", n)
	}
}

// silentServer accepts TCP connections and never says a word, as a host whose sshd hangs
// before its banner. Each accepted connection is sent on accepted; ended receives a
// value once the client closes it (a read returns).
func silentServer(t *testing.T) (port int, accepted <-chan net.Conn, ended <-chan struct{}) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	acc := make(chan net.Conn, 16)
	end := make(chan struct{}, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			acc <- c
			go func() {
				_, _ = io.Copy(io.Discard, c)
				end <- struct{}{}
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		for {
			select {
			case c := <-acc:
				c.Close()
			default:
				return
			}
		}
	})
	return l.Addr().(*net.TCPAddr).Port, acc, end
}

// TestCloseEndsAProbeInFlight: a probe of a server that never answers, in flight when
// the Hosts is closed, ends with the Close (unreachable, saying the hosts were closed)
// and its connection is closed, well before the dial's own bound (ConnectTimeout).
func TestCloseEndsAProbeInFlight(t *testing.T) {
	port, accepted, ended := silentServer(t)
	h, err := ssh.NewHosts(ssh.HostsOptions{ConfigFile: "none", KnownHosts: t.TempDir() + "/known_hosts", AgentSocket: "none"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	got := make(chan ssh.Probe, 1)
	go func() { got <- h.Probe(context.Background(), "root@127.0.0.1:"+itoa(port)) }()
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the probe did not connect")
	}
	closed := time.Now()
	h.Close()
	const bound = 5 * time.Second // ConnectTimeout is 10 s
	select {
	case p := <-got:
		t.Logf("the probe ended %v after Close: %s", time.Since(closed).Round(time.Millisecond), p.Hint)
		if p.Status != ssh.StatusUnreachable || !errors.Is(p.Err, ssh.ErrUnreachable) || !strings.Contains(p.Hint, "hosts closed") {
			t.Errorf("a probe ended by Close: %+v, want unreachable, saying the hosts were closed", p)
		}
	case <-time.After(bound):
		t.Fatalf("the probe did not end within %v of Close", bound)
	}
	select {
	case <-ended:
	case <-time.After(bound - time.Since(closed)):
		t.Fatalf("the probe's connection was not closed within %v of Close", bound)
	}
}
