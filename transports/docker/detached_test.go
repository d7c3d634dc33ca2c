package docker_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

func detachedOptions(t *testing.T) docker.Options {
	return docker.Options{RunDir: filepath.Join(t.TempDir(), "run"), StdinGrace: time.Second, StopGrace: time.Second}
}

// TestDetachedConformance: detached run-mode kernels, reached over kernel.sock in their
// bind-mounted run directories, pass the suite every transport passes.
func TestDetachedConformance(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	transporttest.Run(t, func(t *testing.T) transports.Transport {
		return newTransport(t, cli, detachedOptions(t))
	}, transporttest.WithSpec(func(t *testing.T, s *transports.Spec) {
		s.Dir = "/tmp"
	}), transporttest.WithTimeout(30*time.Second))
}
