// Package testneed is the one "skip here, fail under CI" rule for tests that need a real
// resource (a Docker Engine, sshd, bubblewrap, root): under CI=true a missing resource
// fails the test, so CI never passes by skipping; elsewhere the test skips, naming what
// is missing.
//
//	cli := testneed.DockerEngine(t) // the engine, with the current kernel image
package testneed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/images/kernelimage"
)

// Missing fails t under CI=true and skips it elsewhere, naming what is missing and why.
func Missing(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is required under CI=true: %v", what, err)
	}
	t.Skipf("%s is missing: %v", what, err)
}

// Tools requires each tool on PATH.
func Tools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			Missing(t, tool, err)
		}
	}
}

// Root requires the test to run as root.
func Root(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "root", fmt.Errorf("the test runs as uid %d", os.Geteuid()))
	}
}

// DockerEngine returns a client of the machine's Docker Engine (DOCKER_HOST, else the
// local socket) whose kernel image is current (`.ci/kernel-image` builds it); it is
// closed when the test ends.
func DockerEngine(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		Missing(t, "a Docker Engine", err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		Missing(t, "a Docker Engine", err)
	}
	b, err := images.Stub()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kernelimage.Check(ctx, cli, kernelimage.KernelRef(b), b); err != nil {
		if errors.Is(err, kernelimage.ErrImageMissing) || errors.Is(err, kernelimage.ErrImageStale) {
			Missing(t, "the kernel image (.ci/kernel-image builds it)", err)
		}
		t.Fatal(err)
	}
	return cli
}
