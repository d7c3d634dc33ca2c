package docker_test

import (
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// TestConformance runs the transport conformance suite against run mode: each kernel in
// its own locked-down container, working in the tmpfs /tmp.
func TestConformance(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	transporttest.Run(t, func(t *testing.T) transports.Transport {
		return newTransport(t, cli, docker.Options{})
	}, transporttest.WithSpec(func(t *testing.T, s *transports.Spec) {
		s.Dir = "/tmp"
	}), transporttest.WithTimeout(30*time.Second))
}

// TestConformanceExec runs the suite against exec mode, in an operator-managed container
// (the kernel image with a sleeping entrypoint) that the test starts and removes.
func TestConformanceExec(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	box := sleepingBox(t, cli, map[string]string{"dev.kennel.test": "box"}) // an operator's box, for `docker exec -i box`
	transporttest.Run(t, func(t *testing.T) transports.Transport {
		return newTransport(t, cli, docker.Options{Container: box})
	}, transporttest.WithSpec(func(t *testing.T, s *transports.Spec) {
		s.Dir = "/tmp"
	}), transporttest.WithTimeout(30*time.Second))
}

// TestDetachedConformanceExec runs the suite against detached exec-mode kernels, in an
// operator-managed container: each kernel forked by its start exec and reached over its
// socket through bridges, execs beside it, the run directories under /tmp/kennel-run in
// the container.
func TestDetachedConformanceExec(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	box := sleepingBox(t, cli, map[string]string{"dev.kennel.test": "box"})
	transporttest.Run(t, func(t *testing.T) transports.Transport {
		return newTransport(t, cli, docker.Options{Container: box, RunDir: "/tmp/kennel-run"})
	}, transporttest.WithSpec(func(t *testing.T, s *transports.Spec) {
		s.Dir = "/tmp"
	}), transporttest.WithTimeout(30*time.Second))
}
