package gate

import (
	"math/bits"
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
func BenchmarkTmpScan(b *testing.B) {
	data, n := requestFrames(1)
	line := data[:n-1]
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

func BenchmarkTmpIterOnly(b *testing.B) {
	data, n := requestFrames(1)
	line := data[:n-1]
	var v validator
	v.scan(line)
	sum := 0
	tcpu(b, func() {
		for k := range 3 {
			for t := v.sc.structs[k]; t != 0; t &= t - 1 {
				p := k<<6 | bits.TrailingZeros64(t)
				sum += int(line[p])
			}
		}
	})
}

func BenchmarkTmpStage2Only(b *testing.B) {
	data, n := requestFrames(1)
	line := data[:n-1]
	var v validator
	v.scan(line)
	tcpu(b, func() {
		var inC, scC uint64
		for k := range 3 {
			m := v.sc.blocks[k]
			q := m.quote
			in := prefixXor(q) ^ inC
			inC = uint64(int64(in) >> 63)
			if m.ctl&(in|^m.ws) != 0 {
				b.Fatal()
			}
			sc := ^(m.ws | m.op | q | in)
			v.sc.structs[k] = m.op&^in | q&in | sc&^(sc<<1|scC)
			scC = sc >> 63
			v.sc.quotes[k] = q
		}
	})
}
