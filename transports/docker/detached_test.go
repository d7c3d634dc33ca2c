package docker_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	"github.com/kennel-dev/kennel/link"
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

// TestADetachedContainerCellSurvivesACut: the link's connection is cut while a cell
// sleeps in the container; it reattaches across the container boundary and the cell's
// output arrives once.
func TestADetachedContainerCellSurvivesACut(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	tr := newTransport(t, cli, detachedOptions(t))
	k, c := transporttest.Start(t, tr, transports.Spec{Dir: "/tmp"})
	id, err := c.Send("x = 1\nimport time; time.sleep(2)\nprint(x)")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	l := k.(interface{ Link() *link.Client }).Link()
	l.Drop()
	out := ""
	for {
		f, err := c.Next()
		if err != nil {
			t.Fatalf("after the cut: %v", err)
		}
		if f.Event() == "stream" {
			out += f.Str("text")
		}
		if f.Event() == "done" && f.ID() == id {
			break
		}
	}
	if out != "1\n" || l.Attaches() < 2 {
		t.Fatalf("output %q over %d attaches, want it once after a reattach", out, l.Attaches())
	}
}
