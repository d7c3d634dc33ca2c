// Package dockerneed is testneed's rule for a Docker Engine: a test that needs the
// machine's engine (DOCKER_HOST, else the local socket), or the engine with the current
// kernel image (`.ci/kernel-image` builds it), fails under CI=true when it is missing and
// skips elsewhere, naming what is missing.
//
//	cli := dockerneed.KernelEngine(t) // the engine, with the current kernel image
//
// It is apart from testneed because it imports images, whose own tests use testneed.
package dockerneed

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/images/kernelimage"
	"github.com/kennel-dev/kennel/internal/testneed"
)

// Engine returns a client of the machine's Docker Engine that answered a ping; it is
// closed when the test ends.
func Engine(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		testneed.Missing(t, "a Docker Engine", err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		testneed.Missing(t, "a Docker Engine", err)
	}
	return cli
}

// KernelEngine is Engine whose kernel image (kernelimage.KernelRef of the embedded stub)
// is present and current.
func KernelEngine(t testing.TB) *client.Client {
	t.Helper()
	cli := Engine(t)
	b, err := images.Stub()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kernelimage.Check(ctx, cli, kernelimage.KernelRef(b), b); err != nil {
		if errors.Is(err, kernelimage.ErrImageMissing) || errors.Is(err, kernelimage.ErrImageStale) {
			testneed.Missing(t, "the kernel image (.ci/kernel-image builds it)", err)
		}
		t.Fatal(err)
	}
	return cli
}
