package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/client"
	"github.com/kennel-dev/kennel/daemon"
	"github.com/kennel-dev/kennel/transports/ssh/sshtest"
)

// sshHome makes a home whose ~/.ssh reaches srv (its config and known_hosts), sets HOME
// to it and SSH_AUTH_SOCK to none for the test, and returns it.
func sshHome(t *testing.T, srv *sshtest.Server) string {
	t.Helper()
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{srv.ConfigFile: "config", srv.KnownHosts: "known_hosts"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(home, ".ssh", dst), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("HOME", home)
	t.Setenv("SSH_AUTH_SOCK", "")
	return home
}

// TestHostProbeUsesTheDaemonWhenOneRuns: with a daemon on the default socket, `kennel
// host probe` probes through it (the daemon then holds the answer); with none there, it
// probes directly with the same answer and JSON shape; with --socket naming no daemon it
// fails; a target that does not parse exits 2 either way.
func TestHostProbeUsesTheDaemonWhenOneRuns(t *testing.T) {
	srv := sshtest.Start(t)
	sshHome(t, srv)
	runtimeDir, err := os.MkdirTemp("", "kh")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(runtimeDir)
	t.Setenv("XDG_RUNTIME_DIR", runtimeDir)
	t.Setenv("KENNEL_CONFIG_DIR", filepath.Join(runtimeDir, "config"))
	probe := func(args ...string) (api.HostState, string, int) {
		t.Helper()
		out, errOut, code := runVerb(t, newHostCmd, append([]string{"probe", "--json"}, args...)...)
		var st api.HostState
		if out != "" {
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				t.Fatalf("probe %v: %d %q %q: %v", args, code, out, errOut, err)
			}
		}
		return st, errOut, code
	}

	// No daemon: a direct probe.
	direct, errOut, code := probe(sshtest.Alias)
	if code != 0 || direct.Status != api.HostReady || direct.Home != srv.Home {
		t.Fatalf("direct probe: %d %+v %q", code, direct, errOut)
	}
	if _, errOut, code := probe("--", "-oProxyCommand=x"); code != 2 || !strings.Contains(errOut, "invalid ssh target") {
		t.Fatalf("direct probe of a bad target: %d %q", code, errOut)
	}
	if _, errOut, code := probe("--socket", filepath.Join(runtimeDir, "none.sock"), sshtest.Alias); code != 1 || !strings.Contains(errOut, "no kennel daemon") {
		t.Fatalf("probe through a socket nobody serves: %d %q", code, errOut)
	}

	// A daemon on the default socket.
	sock := daemon.DefaultSocket(os.Getenv)
	ctx, cancel := context.WithCancel(context.Background())
	serve := newServeCmd()
	serve.SetArgs([]string{"--state", filepath.Join(runtimeDir, "state")})
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
			t.Fatalf("no socket at %s: %s", sock, serveErr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	c := client.New(sock)
	defer c.Close()
	if st, err := c.Host(ctx, sshtest.Alias); err != nil || st.Status != api.HostUnknown {
		t.Fatalf("the daemon before the probe: %+v %v", st, err)
	}
	via, errOut, code := probe(sshtest.Alias)
	if code != 0 || via.Status != api.HostReady || via.Home != direct.Home || via.Python != direct.Python || via.Target != direct.Target {
		t.Fatalf("probe through the daemon: %d %+v %q; direct: %+v", code, via, errOut, direct)
	}
	if st, err := c.Host(ctx, sshtest.Alias); err != nil || *st != via {
		t.Fatalf("the daemon after the probe: %+v %v, want %+v", st, err, via)
	}
	if _, errOut, code := probe("--", "-oProxyCommand=x"); code != 2 || !strings.Contains(errOut, "invalid ssh target") {
		t.Fatalf("probe of a bad target through the daemon: %d %q", code, errOut)
	}
	// The text form: the facts on stdout; a host that is not ready exits 1 with its hint.
	out, _, code := runVerb(t, newHostCmd, "probe", sshtest.Alias)
	if code != 0 || !strings.Contains(out, ": ready\n") || !strings.Contains(out, "home "+srv.Home) {
		t.Fatalf("probe: %d %q", code, out)
	}
	out, errOut, code = runVerb(t, newHostCmd, "probe", "root@127.0.0.1:1")
	if code != 1 || !strings.Contains(out, "unreachable") || !strings.Contains(errOut, "refused") {
		t.Fatalf("probe of a closed port: %d %q %q", code, out, errOut)
	}
}
