package ssh_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/transports/ssh"
	"github.com/kennel-dev/kennel/transports/ssh/sshtest"
)

// newHosts returns a Hosts that reaches srv through its config file and known_hosts
// only (no agent, no user config).
func newHosts(t testing.TB, srv *sshtest.Server) *ssh.Hosts {
	t.Helper()
	h, err := ssh.NewHosts(ssh.HostsOptions{
		ConfigFile:  srv.ConfigFile,
		KnownHosts:  srv.KnownHosts,
		AgentSocket: "none",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}
