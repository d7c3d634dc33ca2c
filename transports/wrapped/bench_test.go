package wrapped_test

import (
	"bufio"
	"context"
	"io"
	"testing"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/local"
	"github.com/kennel-dev/kennel/transports/wrapped"
	"github.com/kennel-dev/kennel/transports/wrapped/wrappedtest"
)

// Start to hello through the setsid wrapper against its baseline, the local transport
// (BenchmarkLocalStartToHello), with the same interpreter (Debian's /usr/bin/python3).
// Target ratio <= 1.15:
//
//	go test -run '^$' -bench 'StartToHello' -count 10 ./transports/wrapped/
//
// BenchmarkWrappedSetsidStartToHello sends the bundle over stdin (the default: nothing
// in the sandbox); BenchmarkWrappedSetsidStubDirStartToHello uses a stub already in the
// sandbox (Options.StubDir), as an image that has it does.

func BenchmarkWrappedSetsidStartToHello(b *testing.B) {
	python := wrappedtest.SandboxPython(b)
	tr := wrapped.New(wrapped.Options{ArgvPrefix: wrappedtest.SetsidPrefix(b), Python: python})
	benchStartToHello(b, tr)
}

func BenchmarkWrappedSetsidStubDirStartToHello(b *testing.B) {
	python := wrappedtest.SandboxPython(b)
	bundle, err := images.Stub()
	if err != nil {
		b.Fatal(err)
	}
	dir, err := bundle.Unpack(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	tr := wrapped.New(wrapped.Options{ArgvPrefix: wrappedtest.SetsidPrefix(b), Python: python,
		StubDir: dir, StubHash: bundle.Hash()})
	benchStartToHello(b, tr)
}

func BenchmarkLocalStartToHello(b *testing.B) {
	python := wrappedtest.SandboxPython(b)
	tr := local.New(local.Options{CacheDir: b.TempDir(), Python: python})
	benchStartToHello(b, tr)
}

// benchStartToHello times Start until the hello has been read; the end of each kernel
// is not timed. One untimed start warms caches (the resolved interpreter, the bundle).
func benchStartToHello(b *testing.B, tr transports.Transport) {
	dir := b.TempDir()
	startHello(b, tr, dir)
	b.ResetTimer()
	for b.Loop() {
		startHello(b, tr, dir)
	}
}

func startHello(b *testing.B, tr transports.Transport, dir string) {
	k, err := tr.Start(context.Background(), transports.Spec{SessionID: "bench", Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	line, err := bufio.NewReader(k.Stdout()).ReadSlice('\n')
	if err != nil || len(line) < 10 {
		b.Fatalf("hello: %q, %v", line, err)
	}
	b.StopTimer()
	_ = k.Stdin().Close()
	if _, err := k.Wait(); err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, k.Stdout())
	b.StartTimer()
}
