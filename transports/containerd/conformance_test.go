package containerd_test

import (
	"testing"
	"time"

	"github.com/kennel-dev/kennel/transports"
	ctrd "github.com/kennel-dev/kennel/transports/containerd"
	"github.com/kennel-dev/kennel/transports/containerd/containerdtest"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// TestConformance runs the transport conformance suite: each kernel the task of its own
// locked-down container in the test's containerd, working in the tmpfs /tmp.
func TestConformance(t *testing.T) {
	d := containerdtest.Daemon(t) // started before the suite counts the test's children
	transporttest.Run(t, func(t *testing.T) transports.Transport {
		return newTransport(t, d.Client, ctrd.Options{})
	}, transporttest.WithSpec(func(t *testing.T, s *transports.Spec) {
		s.Dir = "/tmp"
	}), transporttest.WithTimeout(30*time.Second))
}
