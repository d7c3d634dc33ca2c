package gate

import (
	"bytes"
	"runtime"
	"syscall"
	"testing"
	"time"
)

func thrCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(1, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func tcpu(b *testing.B, f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	s := thrCPU()
	for i := 0; i < b.N; i++ {
		f()
	}
	b.ReportMetric(float64(thrCPU()-s)/float64(b.N), "tcpu-ns/op")
}

func BenchmarkTmpValidate200(b *testing.B) {
	data, n := requestFrames(1)
	line := data[:n-1]
	var v validator
	tcpu(b, func() {
		if v.object(line) != vOK {
			b.Fatal("bad")
		}
	})
}
func BenchmarkTmpIndexByte200(b *testing.B) {
	data, _ := requestFrames(1)
	s := 0
	tcpu(b, func() { s += bytes.IndexByte(data, '\n') })
}
func BenchmarkTmpWalk(b *testing.B) {
	bl := make([]blk, (len(pline)+63)/64)
	classify(pline, bl)
	tcpu(b, func() {
		if !walk(pline, bl) {
			b.Fatal("bad")
		}
	})
}
