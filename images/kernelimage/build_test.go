package kernelimage_test

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/images/kernelimage"
	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
)

// TestBuildDefault builds the default kernel image (or finds it current, as .ci/kernel-image
// leaves it) and runs it: the stub's hello carries this binary's bundle hash. A second
// Build does nothing.
func TestBuildDefault(t *testing.T) {
	cli := dockerneed.Engine(t)
	b, err := images.Stub()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var log bytes.Buffer
	res, err := kernelimage.Build(ctx, cli, b, kernelimage.BuildOptions{Log: &log})
	if err != nil {
		t.Fatalf("build: %v\n%s", err, log.String())
	}
	if res.Ref != kernelimage.KernelRef(b) || res.ID == "" {
		t.Fatalf("result %+v", res)
	}
	again, err := kernelimage.Build(ctx, cli, b, kernelimage.BuildOptions{})
	if err != nil || again.KernelBuilt || again.BaseImported || again.ID != res.ID {
		t.Fatalf("second build: %+v, %v; want nothing done", again, err)
	}
	if _, err := kernelimage.Check(ctx, cli, res.Ref, b); err != nil {
		t.Fatalf("check: %v", err)
	}
	// The image runs the stub as its entrypoint, as a non-root user, with python3.
	out, err := exec.CommandContext(ctx, "docker", "run", "--rm", "-i", "--network", "none", res.Ref).Output()
	if err != nil {
		t.Fatalf("docker run: %v", err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	if !strings.HasPrefix(line, `{"event":"hello"`) || !strings.Contains(line, b.Hash()) {
		t.Fatalf("first line %q: want the hello with bundle %s", line, b.Hash())
	}
}

// TestCheckMissingAndStale: a missing image names the build command; an image whose
// label is another stub's is stale. Both are of class errdefs.ErrUnavailable.
func TestCheckMissingAndStale(t *testing.T) {
	cli := dockerneed.Engine(t)
	b, err := images.Stub()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = kernelimage.Check(ctx, cli, "kennel-kernel:doesnotexist0", b)
	if !errors.Is(err, kernelimage.ErrImageMissing) || !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "kennel image build") {
		t.Fatalf("missing image: %v", err)
	}
	// The base image carries no bundle label: stale as a kernel image.
	if _, err := cli.ImageInspect(ctx, kernelimage.BaseRef); err != nil {
		testneed.Missing(t, "the base image (.ci/kernel-image builds it)", err)
	}
	_, err = kernelimage.Check(ctx, cli, kernelimage.BaseRef, b)
	if !errors.Is(err, kernelimage.ErrImageStale) || !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "kennel image build") {
		t.Fatalf("stale image: %v", err)
	}
}
