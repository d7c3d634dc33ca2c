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
		if v.check(line) != vOK {
			b.Fatal("bad")
		}
	})
}
func BenchmarkTmpIndexByte200(b *testing.B) {
	data, _ := requestFrames(1)
	s := 0
	tcpu(b, func() { s += bytes.IndexByte(data, '\n') })
}
func BenchmarkTmpScan(b *testing.B) {
	data, n := requestFrames(1)
	line := append(data, make([]byte, 64)...)[:n-1]
	var v validator
	tcpu(b, func() {
		if !v.scan(line) {
			b.Fatal("bad")
		}
	})
}
func BenchmarkTmpClassify(b *testing.B) {
	data, _ := requestFrames(1)
	pad := append(data, make([]byte, 64)...)
	var v validator
	tcpu(b, func() {
		classify(pad[:192], v.sc.blocks[:3])
	})
}



func BenchmarkTmpPieces(b *testing.B) {
	data, n := requestFrames(1)
	line := append(data, make([]byte, 64)...)[:n-1]
	var v validator
	s := &v.sc
	b.Run("classify", func(b *testing.B) { tcpu(b, func() { classify(line[:192], s.blocks[:3]) }) })
	b.Run("tokens", func(b *testing.B) { tcpu(b, func() { s.tokens(line, 3) }) })
	s.tokens(line, 3)
	b.Run("walk", func(b *testing.B) { tcpu(b, func() { v.walk(line, 3, false) }) })
	b.Run("scan", func(b *testing.B) { tcpu(b, func() { v.scan(line) }) })
	b.Run("check", func(b *testing.B) { tcpu(b, func() { v.check(line) }) })
}

func BenchmarkTmpFrames(b *testing.B) {
	st := streamFrame(1<<20, "c1", false)
	st = st[:len(st)-1]
	dp := displayFrame(1<<20, "c1")
	dp = dp[:len(dp)-1]
	es := streamFrame(1<<20, "c1", true)
	es = es[:len(es)-1]
	var v validator
	for name, line := range map[string][]byte{"stream": st, "display": dp, "escaped": es} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(line)))
			tcpu(b, func() {
				if v.object(line) != vOK {
					b.Fatal("bad")
				}
			})
		})
		b.Run(name+"-indexbyte", func(b *testing.B) {
			b.SetBytes(int64(len(line)))
			tcpu(b, func() { bytes.IndexByte(line, '\n') })
		})
	}
}
