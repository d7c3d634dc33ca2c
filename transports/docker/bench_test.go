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
