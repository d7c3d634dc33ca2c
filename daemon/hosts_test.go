package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/client"
	"github.com/kennel-dev/kennel/daemon"
	"github.com/kennel-dev/kennel/launch"
	"github.com/kennel-dev/kennel/transports/ssh"
	"github.com/kennel-dev/kennel/transports/ssh/sshtest"
)

// hostsDaemon is a daemon whose Kit reaches a real sshd, and a validator of its replies.
type hostsDaemon struct {
	r   *running
	v   *validator
	srv *sshtest.Server
	kit *launch.Kit // the daemon's Kit (the test's, closed after the daemon)
	// closedPort is a loopback port nobody listens on ("closed" in the config).
	closedPort int
}

// serveHosts starts sshd and a daemon whose ssh config names three hosts: sshtest.Alias
// (reachable, its key accepted), "refused" (the same sshd, with a key it refuses) and
// "closed" (a port nobody listens on); no agent, no user config.
func serveHosts(t *testing.T) *hostsDaemon {
	t.Helper()
	srv := sshtest.Start(t)
	port := closedPort(t)
	base, err := os.ReadFile(srv.ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(srv.Dir, "hosts_config")
	extra := fmt.Sprintf("Host refused\n  HostName 127.0.0.1\n  Port %d\n  User root\n  IdentityFile %s\n"+
		"Host closed\n  HostName 127.0.0.1\n  Port %d\n  User root\n  IdentityFile %s\n",
		srv.Port, srv.OtherKeyFile, port, srv.KeyFile)
	if err := os.WriteFile(cfg, append(base, extra...), 0o600); err != nil {
		t.Fatal(err)
	}
	kit := launch.New(launch.Options{Hosts: ssh.HostsOptions{ConfigFile: cfg, KnownHosts: srv.KnownHosts, AgentSocket: "none"}})
	r := serve(t, daemon.Options{Kit: kit})
	t.Cleanup(func() { kit.Close() }) // after the daemon's stop (cleanups run last first)
	return &hostsDaemon{r: r, v: newValidator(t, r.socket), srv: srv, kit: kit, closedPort: port}
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// get reads the state of target (GET /hosts), validated against the document.
func (h *hostsDaemon) get(t *testing.T, target string) api.HostState {
	t.Helper()
	return decode[api.HostState](t, h.v.do(t, exchange{method: "GET", target: "/hosts?" + url.Values{"target": {target}}.Encode(), valid: true, status: 200}))
}

// probe starts a probe of target (POST /hosts/{host}/probe), validated.
func (h *hostsDaemon) probe(t *testing.T, target string) api.HostState {
	t.Helper()
	return decode[api.HostState](t, h.v.do(t, exchange{method: "POST", target: "/hosts/" + url.PathEscape(target) + "/probe", valid: true, status: 202}))
}

// wait reads the state of target until it is not probing (within 40 s: a probe ends
// within daemon.HostProbeTimeout).
func (h *hostsDaemon) wait(t *testing.T, target string) api.HostState {
	t.Helper()
	deadline := time.Now().Add(daemon.HostProbeTimeout + 10*time.Second)
	for {
		st := h.get(t, target)
		if st.Status != api.HostProbing {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still probing after %v", target, daemon.HostProbeTimeout+10*time.Second)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAReachableHostProbesReadyThroughTheDaemon: a host never probed reads unknown, and
// the read reaches nowhere; POST answers 202 probing; the state then reads ready with
// the host's os, arch, home, cores and python, and the bundle not staged; an alias and
// the user@alias it names share one record; the client's ProbeHost and WaitHost agree.
func TestAReachableHostProbesReadyThroughTheDaemon(t *testing.T) {
	h := serveHosts(t)
	// What the host says of itself, over connections of their own (counted, so first).
	wantArch := strings.TrimSpace(h.srv.Run(t, "uname -m"))
	wantPy := strings.TrimSpace(h.srv.Run(t, `python3 -c 'import sys;print("%d.%d.%d" % sys.version_info[:3])'`))
	before := h.srv.Connections()
	if st := h.get(t, sshtest.Alias); st.Status != api.HostUnknown || st.Target != "root@kennel-test:"+strconv.Itoa(h.srv.Port) || st.OS != "" {
		t.Fatalf("a host never probed: %+v", st)
	}
	if n := h.srv.Connections() - before; n != 0 {
		t.Fatalf("reading a host's state made %d connections; a read never probes", n)
	}
	if st := h.probe(t, sshtest.Alias); st.Status != api.HostProbing {
		t.Fatalf("POST probe: %+v, want probing", st)
	}
	st := h.wait(t, sshtest.Alias)
	if st.Status != api.HostReady {
		t.Fatalf("probe of a reachable host: %+v", st)
	}
	if st.OS != "Linux" || st.Arch != wantArch || st.Home != h.srv.Home {
		t.Errorf("os %q arch %q home %q, want Linux, the host's arch, %q", st.OS, st.Arch, st.Home, h.srv.Home)
	}
	if st.Cores != runtime.NumCPU() {
		t.Errorf("cores %d, want %d", st.Cores, runtime.NumCPU())
	}
	if st.Python != wantPy || !filepath.IsAbs(st.PythonPath) {
		t.Errorf("python %q at %q, want %q at an absolute path", st.Python, st.PythonPath, wantPy)
	}
	if st.Staged || st.Bundle == "" || st.Hint != "" || st.SignIn != "" {
		t.Errorf("bundle %q staged %v, hint %q, sign-in %q: want a bundle not staged, no hint", st.Bundle, st.Staged, st.Hint, st.SignIn)
	}
	if st.ProbedAt == 0 || st.FreshUntil-st.ProbedAt != ssh.ReadyTTL.Milliseconds() {
		t.Errorf("probed_at %d fresh_until %d: want fresh for %v", st.ProbedAt, st.FreshUntil, ssh.ReadyTTL)
	}
	if again := h.get(t, "root@"+sshtest.Alias); again != st {
		t.Errorf("root@%s reads %+v, want the record of %s: %+v", sshtest.Alias, again, sshtest.Alias, st)
	}
	// Through the client: the fresh answer is reused (no new connection).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := h.r.c.ProbeHost(ctx, sshtest.Alias); err != nil {
		t.Fatal(err)
	}
	got, err := h.r.c.WaitHost(ctx, sshtest.Alias, 0)
	if err != nil || got.Status != api.HostReady || got.Home != h.srv.Home {
		t.Fatalf("client ProbeHost, WaitHost: %+v, %v", got, err)
	}
	if n := h.srv.Connections() - before; n != 1 {
		t.Errorf("two probes of one host made %d connections, want 1", n)
	}
}

// TestAHostThatRefusesTheKeyNeedsAuth: a key the server refuses reads needs_auth, with a
// hint that says the key was refused and the command that signs in by hand.
func TestAHostThatRefusesTheKeyNeedsAuth(t *testing.T) {
	h := serveHosts(t)
	h.probe(t, "refused")
	st := h.wait(t, "refused")
	if st.Status != api.HostNeedsAuth {
		t.Fatalf("probe with a refused key: %+v", st)
	}
	t.Logf("needs_auth: hint %q, sign-in %q", st.Hint, st.SignIn)
	if !strings.Contains(st.Hint, "refused") || len(st.Hint) > api.MaxHint {
		t.Errorf("hint %q does not say the key was refused (or is over %d bytes)", st.Hint, api.MaxHint)
	}
	if want := "ssh -p " + strconv.Itoa(h.srv.Port) + " root@refused"; st.SignIn != want {
		t.Errorf("sign-in %q, want %q", st.SignIn, want)
	}
	// The hint's own advice is the same command, never "ssh root@refused:PORT" (a host
	// named "refused:PORT" to ssh).
	if !strings.Contains(st.Hint, "("+st.SignIn+")") || strings.Contains(st.Hint, "ssh root@refused:") {
		t.Errorf("hint %q does not advise %q", st.Hint, st.SignIn)
	}
	if st.OS != "" || st.Home != "" || st.FreshUntil-st.ProbedAt != ssh.FailureTTL.Milliseconds() {
		t.Errorf("a host that let nobody in: %+v (fresh for %v)", st, ssh.FailureTTL)
	}
	// The key's own bytes never reach the reply.
	key, err := os.ReadFile(h.srv.OtherKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(key)), "\n")[1:3] {
		if strings.Contains(st.Hint, line) {
			t.Fatalf("the hint holds the private key: %q", st.Hint)
		}
	}
}

// TestAPortNobodyListensOnIsUnreachable: a host whose port nobody listens on reads
// unreachable, with a hint and no sign-in.
func TestAPortNobodyListensOnIsUnreachable(t *testing.T) {
	h := serveHosts(t)
	for _, target := range []string{"closed", "root@127.0.0.1:" + strconv.Itoa(h.closedPort)} {
		h.probe(t, target)
		st := h.wait(t, target)
		if st.Status != api.HostUnreachable || st.Hint == "" || st.SignIn != "" || st.OS != "" {
			t.Fatalf("probe of %s: %+v", target, st)
		}
	}
}

// TestConcurrentProbesOfAHostRunOne: eight POSTs at once for one host all answer 202
// probing, and the host sees one connection.
func TestConcurrentProbesOfAHostRunOne(t *testing.T) {
	h := serveHosts(t)
	before := h.srv.Connections()
	var wg sync.WaitGroup
	states := make([]api.HostState, 8)
	for i := range states {
		wg.Add(1)
		go func() {
			defer wg.Done()
			states[i] = h.probe(t, sshtest.Alias)
		}()
	}
	wg.Wait()
	for i, st := range states {
		if st.Status != api.HostProbing {
			t.Errorf("POST %d: %+v, want probing", i, st)
		}
	}
	if st := h.wait(t, sshtest.Alias); st.Status != api.HostReady {
		t.Fatalf("after the concurrent probes: %+v", st)
	}
	if n := h.srv.Connections() - before; n != 1 {
		t.Fatalf("8 concurrent probes made %d connections, want 1", n)
	}
}

// blackhole accepts connections and never says a word: an ssh handshake with it waits
// until the dial's bound.
func blackhole(t *testing.T) (port int, accepted func() int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().(*net.TCPAddr).Port, func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(conns)
	}
}

// TestHostProbesAreBoundedInNumberAndTime: with 256 hosts being probed (each a
// different user at a server that never answers), a probe of one more is refused with
// 503 unavailable; every probe ends unreachable within the probe's bound; then a probe
// of one more host is taken, and the record answered longest ago is dropped (it reads
// unknown).
func TestHostProbesAreBoundedInNumberAndTime(t *testing.T) {
	h := serveHosts(t)
	port, accepted := blackhole(t)
	target := func(i int) string { return fmt.Sprintf("u%d@127.0.0.1:%d", i, port) }
	const n = 256
	start := time.Now()
	for i := range n {
		if st := h.probe(t, target(i)); st.Status != api.HostProbing {
			t.Fatalf("probe %d: %+v", i, st)
		}
	}
	h.v.do(t, exchange{method: "POST", target: "/hosts/" + target(n) + "/probe", valid: true, status: 503})
	// Joining a probe in flight is still served.
	h.probe(t, target(0))
	for i := range n {
		if st := h.wait(t, target(i)); st.Status != api.HostUnreachable {
			t.Fatalf("probe %d of a server that never answers: %+v", i, st)
		}
	}
	took := time.Since(start)
	t.Logf("%d probes of a silent server ended unreachable after %v (%d connections accepted)", n, took.Round(time.Millisecond), accepted())
	if took > daemon.HostProbeTimeout+10*time.Second {
		t.Fatalf("the probes took %v, over their bound %v", took, daemon.HostProbeTimeout)
	}
	h.probe(t, target(n))
	unknown := 0
	for i := range n + 1 {
		if h.get(t, target(i)).Status == api.HostUnknown {
			unknown++
		}
	}
	if unknown != 1 {
		t.Fatalf("%d hosts read unknown after one more was probed, want 1 (the record answered longest ago)", unknown)
	}
}

// TestHostRoutesRefuseBadTargetsAndAClosedKit: targets that are not [user@]host[:port]
// are 400 invalid, by either route, and change nothing; a daemon whose Kit is closed
// answers 503 unavailable.
func TestHostRoutesRefuseBadTargetsAndAClosedKit(t *testing.T) {
	h := serveHosts(t)
	for _, bad := range []string{"-oProxyCommand=x", "a b", "root@", "h:99999", "[::1", "a\x01b"} {
		h.v.do(t, exchange{method: "GET", target: "/hosts?" + url.Values{"target": {bad}}.Encode(), valid: true, status: 400})
		h.v.do(t, exchange{method: "POST", target: "/hosts/" + url.PathEscape(bad) + "/probe", valid: true, status: 400})
	}
	// A host with a slash: its escaped form is one path segment the daemon refuses (the
	// document's router cannot match %2F, so the client says it here).
	h.v.do(t, exchange{method: "GET", target: "/hosts?" + url.Values{"target": {"a/b"}}.Encode(), valid: true, status: 400})
	var ae *api.Error
	if _, err := h.r.c.ProbeHost(context.Background(), "a/b"); !errors.As(err, &ae) || ae.Code != api.CodeInvalid || ae.Status != 400 {
		t.Fatalf("POST /hosts/a%%2Fb/probe: %v", err)
	}
	if n := h.srv.Connections(); n != 0 {
		t.Fatalf("refused targets made %d connections", n)
	}
	kit := launch.New(launch.Options{})
	kit.Close()
	closed := newValidator(t, serve(t, daemon.Options{Kit: kit}).socket)
	closed.do(t, exchange{method: "GET", target: "/hosts?target=h", valid: true, status: 503})
	closed.do(t, exchange{method: "POST", target: "/hosts/h/probe", valid: true, status: 503})
}

// TestWhatSessionsProbedReadsWithoutAPost: the daemon's reads answer the probes its Kit
// made on its own: a session assembled over ssh makes its host read ready (what the
// host said, the bundle staged), and a probe through the Kit's Hosts makes a host that
// refuses connections read unreachable, without a POST, and without a read reaching
// the host.
func TestWhatSessionsProbedReadsWithoutAPost(t *testing.T) {
	h := serveHosts(t)
	if st := h.get(t, sshtest.Alias); st.Status != api.HostUnknown {
		t.Fatalf("a host never probed: %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := h.r.c.CreateSession(ctx, api.CreateSession{Transport: &api.Transport{SSH: &api.SSH{Target: sshtest.Alias}}}, client.CreateOptions{})
	if err != nil {
		t.Fatalf("create an ssh session: %v", err)
	}
	before := h.srv.Connections()
	for _, target := range []string{sshtest.Alias, "root@" + sshtest.Alias} {
		st := h.get(t, target)
		if st.Status != api.HostReady || st.Home != h.srv.Home || st.OS != "Linux" || !st.Staged || st.ProbedAt == 0 {
			t.Errorf("GET %s after an ssh session started there: %+v, want ready, staged, with the host's home", target, st)
		}
	}
	if n := h.srv.Connections() - before; n != 0 {
		t.Errorf("reading the state made %d connections", n)
	}
	if err := h.r.c.DeleteSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	hosts, err := h.kit.Hosts()
	if err != nil {
		t.Fatal(err)
	}
	if p := hosts.Probe(ctx, "closed"); p.Status != ssh.StatusUnreachable {
		t.Fatalf("probe of a closed port: %+v", p)
	}
	if st := h.get(t, "closed"); st.Status != api.HostUnreachable || st.Hint == "" || st.FreshUntil-st.ProbedAt != ssh.FailureTTL.Milliseconds() {
		t.Errorf("GET closed after the Kit probed it: %+v, want unreachable", st)
	}
}

// probeGoroutines counts the goroutines that run a probe of the daemon's.
func probeGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "daemon.(*hostProbes).run(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestAProbeInFlightEndsWithTheShutdown: a probe of a server that never answers, in
// flight when the daemon shuts down, ends with the shutdown: Serve returns within a few
// seconds and no probe of the daemon's runs on after it (the probe's own bounds are
// 10 s for the dial and daemon.HostProbeTimeout).
func TestAProbeInFlightEndsWithTheShutdown(t *testing.T) {
	h := serveHosts(t)
	port, accepted := blackhole(t)
	target := "u@127.0.0.1:" + strconv.Itoa(port)
	if st := h.probe(t, target); st.Status != api.HostProbing {
		t.Fatalf("POST probe: %+v", st)
	}
	for deadline := time.Now().Add(10 * time.Second); accepted() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the probe did not connect to the silent server")
		}
	}
	if st := h.get(t, target); st.Status != api.HostProbing {
		t.Fatalf("a probe of a silent server: %+v, want probing", st)
	}
	start := time.Now()
	h.r.stop()
	took := time.Since(start)
	left := probeGoroutines()
	t.Logf("Serve returned %v after the shutdown began; %d probes still running", took.Round(time.Millisecond), left)
	if took > 5*time.Second {
		t.Errorf("Serve returned %v after the shutdown began, want within 5 s", took)
	}
	if left != 0 {
		t.Errorf("%d probes of the daemon's run on after Serve returned", left)
	}
}
