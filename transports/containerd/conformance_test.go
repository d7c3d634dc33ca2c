package containerd_test

import (
	"path/filepath"
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

// TestDetachedConformance runs the suite on detached kernels (Options.RunDir): each
// kernel's run directory bind-mounted into its container, its link dialled across the
// container boundary, its task outliving the controller (the cut, the detach and
// reattach from a record by a fresh Transport, the host call of a replaced controller).
func TestDetachedConformance(t *testing.T) {
	d := containerdtest.Daemon(t)
	// One run directory per case: a case's later Transport (a restarted controller)
	// reattaches to what its first one started.
	runs := map[testing.TB]string{}
	transporttest.Run(t, func(t *testing.T) transports.Transport {
		if runs[t] == "" {
			runs[t] = filepath.Join(t.TempDir(), "run")
		}
		return newTransport(t, d.Client, ctrd.Options{RunDir: runs[t]})
	}, transporttest.WithSpec(func(t *testing.T, s *transports.Spec) {
		s.Dir = "/tmp"
	}), transporttest.WithTimeout(30*time.Second))
}
