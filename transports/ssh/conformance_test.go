package ssh_test

import (
	"os"
	"testing"

	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/ssh"
	"github.com/kennel-dev/kennel/transports/ssh/sshtest"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// TestConformance runs the transport conformance suite against kernels on a real sshd
// (through a login profile that prints a banner). The suite's directories are local
// temporary directories, which the "remote" host (this machine) sees at the same paths.
func TestConformance(t *testing.T) {
	srv := sshtest.Start(t)
	hosts := newHosts(t, srv)
	transporttest.Run(t, func(t *testing.T) transports.Transport {
		return ssh.New(hosts, ssh.Options{Target: sshtest.Alias})
	}, transporttest.WithSpec(func(t *testing.T, s *transports.Spec) {
		if err := os.Chmod(s.Dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}))
}
