package local_test

import (
	"os/exec"
	"testing"

	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// BenchmarkLocalStartToHello measures Start until the hello frame has been read, with the
// interpreter resolved and the bundle unpacked beforehand (once per Transport). Its
// baseline is BenchmarkPythonPass: the same interpreter running `-c pass`.
func BenchmarkLocalStartToHello(b *testing.B) {
	transporttest.BenchStartToHello(b, newTransport(b))
}

// BenchmarkPythonPass is the baseline of BenchmarkLocalStartToHello: the resolved
// interpreter started by os/exec to run `-c pass`, until it has exited.
func BenchmarkPythonPass(b *testing.B) {
	p := needPython(b)
	for b.Loop() {
		if err := exec.Command(p, "-c", "pass").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCellRoundTrip runs `pass` cells, execute to done, on one warm kernel: over
// stdio (protocol 1, the reaper's pipes) and over a detached kernel's link (protocol 2,
// its socket and both outboxes). The ratio link/stdio is the cost of the session layer.
func BenchmarkCellRoundTrip(b *testing.B) {
	for _, bc := range []struct {
		name string
		tr   func(b *testing.B) transports.Transport
	}{
		{"stdio", func(b *testing.B) transports.Transport { return newTransport(b) }},
		{"link", func(b *testing.B) transports.Transport { return newDetached(b, 0) }},
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
