package docker_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/images/kernelimage"
	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/transports/docker"
)

// childEnv selects a helper role of the test binary (see TestMain).
const childEnv = "KENNEL_DOCKER_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "controller":
		os.Exit(childController())
	case "sweep":
		os.Exit(childSweep())
	}
	os.Exit(m.Run())
}

// need fails the test under CI=true and skips it otherwise, naming what is missing.
func need(t testing.TB, what string, err error) {
	t.Helper()
	testneed.Missing(t, what, err)
}

// engine returns a client of the machine's Docker Engine whose kernel image is current.
func engine(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		need(t, "docker engine", err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		need(t, "docker engine", err)
	}
	b, err := images.Stub()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kernelimage.Check(ctx, cli, kernelimage.KernelRef(b), b); err != nil {
		if errors.Is(err, kernelimage.ErrImageMissing) || errors.Is(err, kernelimage.ErrImageStale) {
			need(t, "kernel image (.ci/kernel-image builds it)", err)
		}
		t.Fatal(err)
	}
	return cli
}

// newTransport makes a run-mode transport with short graces for tests.
func newTransport(t testing.TB, cli client.APIClient, o docker.Options) *docker.Transport {
	t.Helper()
	if o.StdinGrace == 0 {
		o.StdinGrace = time.Second
	}
	if o.StopGrace == 0 {
		o.StopGrace = time.Second
	}
	tr, err := docker.New(cli, o)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}
