package docker_test

import (
	"context"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/images/kernelimage"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// TestConformance runs the transport conformance suite against run mode: each kernel in
// its own locked-down container, working in the tmpfs /tmp.
func TestConformance(t *testing.T) {
	cli := engine(t)
	transporttest.Run(t, func(t *testing.T) transports.Transport {
		return newTransport(t, cli, docker.Options{})
	}, transporttest.WithSpec(func(t *testing.T, s *transports.Spec) {
		s.Dir = "/tmp"
	}), transporttest.WithTimeout(30*time.Second))
}

// TestConformanceExec runs the suite against exec mode, in an operator-managed container
// (the kernel image with a sleeping entrypoint) that the test starts and removes.
func TestConformanceExec(t *testing.T) {
	cli := engine(t)
	box := operatorBox(t, cli)
	transporttest.Run(t, func(t *testing.T) transports.Transport {
		return newTransport(t, cli, docker.Options{Container: box})
	}, transporttest.WithSpec(func(t *testing.T, s *transports.Spec) {
		s.Dir = "/tmp"
	}), transporttest.WithTimeout(30*time.Second))
}

// operatorBox starts a long-running container of the kernel image, as an operator would
// for `docker exec -i box`, and removes it when the test ends.
func operatorBox(t *testing.T, cli *client.Client) string {
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
			Labels:     map[string]string{"dev.kennel.test": "box"},
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
