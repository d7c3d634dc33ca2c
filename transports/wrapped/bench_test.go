package wrapped_test

import (
	"bufio"
	"bytes"
	"context"
	"testing"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports"
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

// BenchmarkWrappedCellRoundTrip runs `pass` cells, execute to done, on one warm kernel
// under the setsid wrapper: over the wrapper's stdio (protocol 1), and detached, over its
// link through the start command's bridge (protocol 2: the link's envelopes and acks, one
// more process and socket hop in the sandbox).
//
//	go test -run '^$' -bench 'WrappedCellRoundTrip|WrappedReattach' -count 5 ./transports/wrapped/
func BenchmarkWrappedCellRoundTrip(b *testing.B) {
	for _, bc := range []struct {
		name string
		tr   func(b *testing.B) *wrapped.Transport
	}{
		{"stdio", func(b *testing.B) *wrapped.Transport { return wrappedtest.Setsid(b, wrapped.Options{}).Transport }},
		{"bridge", func(b *testing.B) *wrapped.Transport {
			return wrappedtest.SetsidDetached(b, wrapped.Options{}, "").Transport
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			_, c := transporttest.Start(b, bc.tr(b), transports.Spec{Dir: b.TempDir()})
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

// BenchmarkWrappedReattach times Reattach from a record to the hello of a running
// detached kernel under the setsid wrapper, by a fresh Transport: an attach bridge
// started under the wrapper (the wrapper, env and python with the bridge program),
// its connection to the socket, and the handshake. Each round's link is then let go.
func BenchmarkWrappedReattach(b *testing.B) {
	root := b.TempDir()
	k, c := transporttest.Start(b, wrappedtest.SetsidDetached(b, wrapped.Options{}, root).Transport, transports.Spec{Dir: b.TempDir()})
	if _, err := c.Run("pass"); err != nil {
		b.Fatal(err)
	}
	rec := k.(transports.Detachable).Record()
	tr := wrappedtest.SetsidDetached(b, wrapped.Options{}, root).Transport
	for b.Loop() {
		k2, err := tr.Reattach(context.Background(), rec)
		if err != nil {
			b.Fatal(err)
		}
		line, err := bufio.NewReader(k2.Stdout()).ReadSlice('\n')
		if err != nil || !bytes.Contains(line, []byte(`"hello"`)) {
			b.Fatalf("hello: %q, %v", line, err)
		}
		if err := k2.(transports.Detachable).Detach(); err != nil {
			b.Fatal(err)
		}
	}
}
