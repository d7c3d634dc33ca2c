package local_test

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"testing"

	"github.com/kennel-dev/kennel/transports"
)

// BenchmarkLocalStartToHello measures Start until the hello frame has been read, with the
// interpreter resolved and the bundle unpacked beforehand (once per Transport). Its
// baseline is BenchmarkPythonPass: the same interpreter running `-c pass`.
func BenchmarkLocalStartToHello(b *testing.B) {
	tr := newTransport(b)
	dir := b.TempDir()
	warm, err := tr.Start(context.Background(), transports.Spec{SessionID: "warm", Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	killAndWait(warm)
	_, _ = io.Copy(io.Discard, warm.Stdout())
	b.ResetTimer()
	for b.Loop() {
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
