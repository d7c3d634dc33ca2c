package docker_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kennel-dev/kennel/images/kernelimage"
	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
)

// A session never pulls or builds: a missing image, or one of another stub version, is
// an error that names `kennel image build`, and nothing is left behind.
func TestStartMissingOrStaleImage(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	for _, c := range []struct {
		image string
		want  error
	}{
		{"kennel-kernel:missing00000", kernelimage.ErrImageMissing},
		{kernelimage.BaseRef, kernelimage.ErrImageStale},
	} {
		tr := newTransport(t, cli, docker.Options{Image: c.image})
		k, err := tr.Start(context.Background(), transports.Spec{SessionID: "img", Dir: "/tmp"})
		if err == nil {
			_ = k.Kill(context.Background())
			t.Fatalf("image %s: started", c.image)
		}
		if !errors.Is(err, c.want) || !errors.Is(err, transports.ErrUnavailable) || !strings.Contains(err.Error(), "kennel image build") {
			t.Errorf("image %s: %v, want %v", c.image, err, c.want)
		}
	}
}
