package local_test

import (
	"os/exec"
	"testing"

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
