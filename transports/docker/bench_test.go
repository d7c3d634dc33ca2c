package docker_test

import (
	"bufio"
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/images/kernelimage"
	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// BenchmarkStartToHello: a locked-down container kernel from Start to its hello frame
// (the kill and removal are outside the timer). Compare with BenchmarkDockerRunPass.
func BenchmarkStartToHello(b *testing.B) {
	benchStart(b, false)
}

// BenchmarkStartHelloKill: the whole cycle, Start, hello, Kill and the container removed.
func BenchmarkStartHelloKill(b *testing.B) {
	benchStart(b, true)
}

func benchStart(b *testing.B, timeKill bool) {
	cli := dockerneed.KernelEngine(b)
	tr := newTransport(b, cli, docker.Options{})
	ctx := context.Background()
	for b.Loop() {
		k, err := tr.Start(ctx, transports.Spec{SessionID: "bench", Dir: "/tmp"})
		if err != nil {
			b.Fatal(err)
		}
		rd := bufio.NewReader(k.Stdout())
		line, err := rd.ReadString('\n')
		if err != nil || !strings.Contains(line, `"hello"`) {
			b.Fatalf("no hello: %q, %v", line, err)
		}
		if !timeKill {
			b.StopTimer()
		}
		go func() { _, _ = rd.WriteTo(discard{}) }()
		_ = k.Kill(ctx)
		_, _ = k.Wait()
		if !timeKill {
			b.StartTimer()
		}
	}
}

// BenchmarkDockerRunPass is the baseline: `docker run --rm --network none --entrypoint
// python3 IMAGE -c pass` through the docker CLI, the same image.
func BenchmarkDockerRunPass(b *testing.B) {
	dockerneed.KernelEngine(b)
	st, err := images.Stub()
	if err != nil {
		b.Fatal(err)
	}
	ref := kernelimage.KernelRef(st)
	for b.Loop() {
		if out, err := exec.Command("docker", "run", "--rm", "--network", "none", "--entrypoint", "python3", ref, "-c", "pass").CombinedOutput(); err != nil {
			b.Fatalf("docker run: %v: %s", err, out)
		}
	}
}

// BenchmarkExecCellRoundTrip runs `pass` cells, execute to done, on one warm exec-mode
// kernel: over the exec's attached stream (protocol 1), and detached, over its link
// through the start exec's bridge (protocol 2).
//
//	go test -run '^$' -bench 'ExecCellRoundTrip|ExecDetachedReattach' -count 5 ./transports/docker/
func BenchmarkExecCellRoundTrip(b *testing.B) {
	cli := dockerneed.KernelEngine(b)
	box := sleepingBox(b, cli, map[string]string{"dev.kennel.test": "box"})
	for _, bc := range []struct {
		name string
		o    docker.Options
	}{
		{"stdio", docker.Options{Container: box}},
		{"bridge", execDetachedOptions(box)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			_, c := transporttest.Start(b, newTransport(b, cli, bc.o), transports.Spec{Dir: "/tmp"})
			if _, err := c.Run("pass"); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, _, err := c.Execute("pass"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkExecDetachedReattach times Reattach from a record to the hello of a running
// exec-mode detached kernel by a fresh Transport: an attach exec of the bridge, its
// connection to the socket, and the handshake. Each round's link is then let go.
func BenchmarkExecDetachedReattach(b *testing.B) {
	cli := dockerneed.KernelEngine(b)
	box := sleepingBox(b, cli, map[string]string{"dev.kennel.test": "box"})
	k, c := transporttest.Start(b, newTransport(b, cli, execDetachedOptions(box)), transports.Spec{Dir: "/tmp"})
	if _, err := c.Run("pass"); err != nil {
		b.Fatal(err)
	}
	rec := k.(transports.Detachable).Record()
	tr := newTransport(b, cli, execDetachedOptions(box))
	for b.Loop() {
		k2, err := tr.Reattach(context.Background(), rec)
		if err != nil {
			b.Fatal(err)
		}
		line, err := bufio.NewReader(k2.Stdout()).ReadSlice('\n')
		if err != nil || !strings.Contains(string(line), `"hello"`) {
			b.Fatalf("hello: %q, %v", line, err)
		}
		if err := k2.(transports.Detachable).Detach(); err != nil {
			b.Fatal(err)
		}
	}
}
