package docker_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
	"github.com/kennel-dev/kennel/transports/transporttest"
	"github.com/moby/moby/client"
)

func detachedOptions(t testing.TB) docker.Options {
	return docker.Options{RunDir: filepath.Join(t.TempDir(), "run"), StdinGrace: time.Second, StopGrace: time.Second}
}

// TestDetachedConformance: detached run-mode kernels, reached over kernel.sock in their
// bind-mounted run directories, pass the suite every transport passes (the transports
// of one case share their run directory root, as a restarted controller's do).
func TestDetachedConformance(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	roots := map[string]docker.Options{}
	transporttest.Run(t, func(t *testing.T) transports.Transport {
		o, ok := roots[t.Name()]
		if !ok {
			o = detachedOptions(t)
			roots[t.Name()] = o
		}
		return newTransport(t, cli, o)
	}, transporttest.WithSpec(func(t *testing.T, s *transports.Spec) {
		s.Dir = "/tmp"
	}), transporttest.WithTimeout(30*time.Second))
}

// TestADetachedContainerEndsAfterItsGraceOrItsRunDirectory: let go, a detached kernel's
// container ends after its 2 s grace with nothing attached; another, still attached, ends
// within about a second of its run directory's removal on the host. Neither container is
// left.
func TestADetachedContainerEndsAfterItsGraceOrItsRunDirectory(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	o := detachedOptions(t)
	o.KernelGrace = 2 * time.Second
	tr := newTransport(t, cli, o)
	start := func(name string) transports.Kernel {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		k, err := tr.Start(ctx, transports.Spec{SessionID: name, Dir: "/tmp"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k.Kill(context.Background()) })
		c := transporttest.NewClient(k)
		if _, err := c.Hello(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Run("x = 1"); err != nil {
			t.Fatal(err)
		}
		return k
	}
	gone := func(k transports.Kernel, within time.Duration) time.Duration {
		began := time.Now()
		for {
			_, err := cli.ContainerInspect(context.Background(), k.Info().ID, client.ContainerInspectOptions{})
			if cerrdefs.IsNotFound(err) {
				return time.Since(began)
			}
			if time.Since(began) > within {
				t.Fatalf("container %.12s still there after %v", k.Info().ID, within)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	let := start("grace" + strconv.Itoa(os.Getpid()))
	if err := let.(interface{ Detach() error }).Detach(); err != nil {
		t.Fatal(err)
	}
	t.Logf("let go: container gone %v after the detach (grace 2 s)", gone(let, 20*time.Second).Round(time.Millisecond))

	kept := start("rundir" + strconv.Itoa(os.Getpid()))
	entries, err := os.ReadDir(o.RunDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(o.RunDir, e.Name()))
	}
	t.Logf("run directory removed: container gone %v after", gone(kept, 10*time.Second).Round(time.Millisecond))
}

// TestReattachRunMode: a run-mode record whose container is gone is errdefs.ErrNotFound
// (its run directory removed); one naming a container that is no detached kernel's is
// refused (errdefs.ErrInvalidArgument) and the container left alone.
func TestReattachRunMode(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	o := detachedOptions(t)
	tr := newTransport(t, cli, o)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k, err := tr.Start(ctx, transports.Spec{SessionID: "reattach" + strconv.Itoa(os.Getpid()), Dir: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	c := transporttest.NewClient(k)
	if _, err := c.Hello(); err != nil {
		t.Fatal(err)
	}
	rec := k.(transports.Detachable).Record()
	if rec.Where != k.Info().ID || filepath.Dir(rec.RunDir) != o.RunDir {
		t.Fatalf("record %+v: want the container's id and a run directory under %s", rec, o.RunDir)
	}
	if err := k.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Wait(); err != nil {
		t.Fatal(err)
	}
	_ = c.End(10 * time.Second)
	if err := os.MkdirAll(rec.RunDir, 0o700); err != nil { // what a crash may leave
		t.Fatal(err)
	}
	if _, err := newTransport(t, cli, o).Reattach(ctx, rec); !cerrdefs.IsNotFound(err) {
		t.Errorf("reattach to a removed container: %v, want errdefs.ErrNotFound", err)
	}
	if _, err := os.Stat(rec.RunDir); !os.IsNotExist(err) {
		t.Errorf("the run directory of a gone kernel: %v, want removed", err)
	}
	box := sleepingBox(t, cli, map[string]string{"dev.kennel.test": "box"})
	other := rec
	other.Where = box
	if _, err := newTransport(t, cli, o).Reattach(ctx, other); !cerrdefs.IsInvalidArgument(err) {
		t.Errorf("reattach naming another container: %v, want errdefs.ErrInvalidArgument", err)
	}
	if ins, err := cli.ContainerInspect(ctx, box, client.ContainerInspectOptions{}); err != nil || !ins.Container.State.Running {
		t.Errorf("the other container was touched: %v", err)
	}
}
