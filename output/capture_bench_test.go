package output

import (
	"io"
	"math/rand/v2"
	"os"
	"testing"
)

const benchTotal = 256 << 20

// BenchmarkCaptureWrite writes 256 MiB in 64 KiB chunks through a Capture with a spill
// directory: the first 16 MiB go to disk, the rest only through the tail.
func BenchmarkCaptureWrite(b *testing.B) {
	chunk := randomBytes(rand.New(rand.NewPCG(1, 1)), 64<<10)
	b.SetBytes(benchTotal)
	for b.Loop() {
		c, err := NewCapture(CaptureOptions{SpillDir: privateTempDir(b)})
		if err != nil {
			b.Fatal(err)
		}
		for range benchTotal / len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				b.Fatal(err)
			}
		}
		if err := c.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPipeCopy is the baseline: io.Copy of the same bytes, in the same chunks,
// through an os.Pipe to io.Discard.
func BenchmarkPipeCopy(b *testing.B) {
	chunk := randomBytes(rand.New(rand.NewPCG(1, 1)), 64<<10)
	b.SetBytes(benchTotal)
	for b.Loop() {
		r, w, err := os.Pipe()
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for range benchTotal / len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					break
				}
			}
			w.Close()
		}()
		if n, err := io.Copy(io.Discard, r); err != nil || n != benchTotal {
			b.Fatalf("copied %d, %v", n, err)
		}
		r.Close()
	}
}
