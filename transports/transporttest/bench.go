package transporttest

import (
	"bufio"
	"context"
	"io"
	"testing"

	"github.com/kennel-dev/kennel/transports"
)

// BenchStartToHello times tr's Start until the kernel's first line (its hello) has been
// read, in a fresh directory; the end of each kernel (stdin closed, Wait, Stdout drained)
// is not timed. One untimed start first warms the transport's caches (a resolved
// interpreter, an unpacked bundle). Two transports compared with it run the same code.
func BenchStartToHello(b *testing.B, tr transports.Transport) {
	dir := b.TempDir()
	startToHello(b, tr, dir)
	b.ResetTimer()
	for b.Loop() {
		startToHello(b, tr, dir)
	}
}

func startToHello(b *testing.B, tr transports.Transport, dir string) {
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
