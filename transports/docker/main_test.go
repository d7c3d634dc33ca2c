package docker_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/images/kernelimage"
	"github.com/kennel-dev/kennel/transports/docker"
	"github.com/kennel-dev/kennel/transports/transporttest"
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

// sleepingBox starts a container of the kernel image that sleeps, with labels, and
// removes it when the test ends if it is still there.
func sleepingBox(t testing.TB, cli *client.Client, labels map[string]string) string {
	t.Helper()
	b, err := images.Stub()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	init := true
	c, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image:      kernelimage.KernelRef(b),
			Entrypoint: []string{"sleep", "infinity"},
			Labels:     labels,
		},
		HostConfig: &container.HostConfig{NetworkMode: "none", Init: &init, CapDrop: []string{"ALL"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = cli.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true})
	})
	if _, err := cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	return c.ID
}

// hold sends a cell that prints "holding" and then runs on, and returns once it has
// printed it.
func hold(t *testing.T, c *transporttest.Client, cell string) {
	t.Helper()
	if _, err := c.Send(cell); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := c.Next()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(f.Raw), "holding") {
			return
		}
	}
}
