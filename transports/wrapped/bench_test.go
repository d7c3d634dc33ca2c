package wrapped_test

import (
	"testing"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports/local"
	"github.com/kennel-dev/kennel/transports/transporttest"
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
	transporttest.BenchStartToHello(b, tr)
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
	transporttest.BenchStartToHello(b, tr)
}

func BenchmarkLocalStartToHello(b *testing.B) {
	python := wrappedtest.SandboxPython(b)
	tr := local.New(local.Options{CacheDir: b.TempDir(), Python: python})
	transporttest.BenchStartToHello(b, tr)
}
