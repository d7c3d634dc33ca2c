package gate

import (
	"bytes"
	"testing"
	"unicode/utf8"
)

func BenchmarkScratchIndexByte1MiB(b *testing.B) {
	line := bytes.Repeat([]byte("iVBORw0KGgoAAAANSUhEUgAA"), 1<<20/24)
	b.SetBytes(int64(len(line)))
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		if bytes.IndexByte(line, '\n') >= 0 {
			b.Fatal()
		}
	}
}

func BenchmarkScratchUTF8Valid1MiB(b *testing.B) {
	line := bytes.Repeat([]byte("iVBORw0KGgoAAAANSUhEUgAA"), 1<<20/24)
	b.SetBytes(int64(len(line)))
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		if !utf8.Valid(line) {
			b.Fatal()
		}
	}
}

func BenchmarkScratchCopy1MiB(b *testing.B) {
	line := bytes.Repeat([]byte("iVBORw0KGgoAAAANSUhEUgAA"), 1<<20/24)
	dst := make([]byte, len(line))
	b.SetBytes(int64(len(line)))
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		copy(dst, line)
	}
}
