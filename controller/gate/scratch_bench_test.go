package gate

import (
	"bytes"
	"testing"
)

func BenchmarkScratchValidate200(b *testing.B) {
	data, n := requestFrames(1)
	line := data[:n-1]
	var v validator
	b.SetBytes(int64(n))
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		if v.object(line) != vOK {
			b.Fatal("bad")
		}
	}
}

func BenchmarkScratchHead200(b *testing.B) {
	data, n := requestFrames(1)
	line := data[:n-1]
	var s headScanner
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		if !s.scan(line).hasType {
			b.Fatal("bad")
		}
	}
}

func BenchmarkScratchValidate1MiB(b *testing.B) {
	f := streamFrame(1<<20, "c1")
	line := f[:len(f)-1]
	var v validator
	b.SetBytes(int64(len(f)))
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		if v.object(line) != vOK {
			b.Fatal("bad")
		}
	}
}

func BenchmarkScratchPlain1MiB(b *testing.B) {
	line := []byte(`{"event":"display","id":"c1","data":{"image/png":"` + string(bytes.Repeat([]byte("iVBORw0KGgoAAAANSUhEUgAA"), 1<<20/24)) + `"}}`)
	var v validator
	b.SetBytes(int64(len(line)))
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		if v.object(line) != vOK {
			b.Fatal("bad")
		}
	}
}
