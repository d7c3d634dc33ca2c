package gate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"
)

// repeatReader serves data over and over, n bytes in all, in reads as large as asked:
// the same bytes for the gate and for the bufio baseline.
type repeatReader struct {
	data []byte
	off  int
	left int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && r.left > 0 {
		c := copy(p[n:min(len(p), n+r.left)], r.data[r.off:])
		n += c
		r.left -= c
		r.off += c
		if r.off == len(r.data) {
			r.off = 0
		}
	}
	return n, nil
}

// streamFrame is a 1 MiB stream frame as the stub writes it: printable text with an
// escaped newline every 80 bytes or so and a few non-ASCII runes.
func streamFrame(size int, id string) []byte {
	pre := `{"event": "stream", "id": "` + id + `", "name": "stdout", "text": "`
	post := "\"}\n"
	var sb strings.Builder
	sb.WriteString(pre)
	line := `[INFO] step 12345 loss=0.0421 accuracy=0.9876 lr=3e-4 tokens/s=12\u00e9456 \"ok\"\n`
	for sb.Len()+len(line)+len(post) <= size {
		sb.WriteString(line)
	}
	for sb.Len()+len(post) < size {
		sb.WriteByte('x')
	}
	sb.WriteString(post)
	return []byte(sb.String())
}

// requestFrames returns n host requests of about 200 bytes each, with distinct ids.
func requestFrames(n int) (data []byte, frameLen int) {
	for i := range n {
		f := fmt.Sprintf(`{"event": "host_request", "id": "h%06d", "type": "fs.read", "cell": "c12", "args": {"path": "/work/src/kennel/controller/gate/run.go", "offset": 0, "limit": 2000}}`+"\n", i)
		data = append(data, f...)
		frameLen = len(f)
	}
	return data, frameLen
}

// cpuTime returns the process's user and system CPU time. The benchmarks report it per
// op beside the wall time, since these machines are shared and wall time swings.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports CPU ns per op since start.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

func benchGate(b *testing.B, data []byte, frameLen int) {
	b.SetBytes(int64(frameLen))
	b.ReportAllocs()
	g := New(Config{
		Serves:    func(string) bool { return true },
		OnRequest: func(Request) {},
		OnRefusal: func(r Refusal) { b.Fatalf("refused %+v", r) },
		OnEvent:   func(Frame) {},
	})
	b.ResetTimer()
	defer reportCPU(b, cpuTime())
	if err := g.Run(context.Background(), &repeatReader{data: data, left: b.N * frameLen}); err != nil {
		b.Fatal(err)
	}
}

func benchBufio(b *testing.B, data []byte, frameLen int, bufSize int) {
	b.SetBytes(int64(frameLen))
	b.ReportAllocs()
	b.ResetTimer()
	defer reportCPU(b, cpuTime())
	br := bufio.NewReaderSize(&repeatReader{data: data, left: b.N * frameLen}, bufSize)
	lines := 0
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		lines += len(line) & 1
	}
	_ = lines
}

func frames1MiB() []byte {
	var data []byte
	for _, id := range []string{"c1", "c1", "c2", "c2"} {
		data = append(data, streamFrame(1<<20, id)...)
	}
	return data
}

// BenchmarkGate1MiBFrames: 1 MiB stream frames through the gate (split, validate, head).
func BenchmarkGate1MiBFrames(b *testing.B) { benchGate(b, frames1MiB(), 1<<20) }

// BenchmarkBufioLines1MiB: the baseline, the same bytes split by bufio.Reader.ReadSlice.
func BenchmarkBufioLines1MiB(b *testing.B) { benchBufio(b, frames1MiB(), 1<<20, 4<<20) }

// BenchmarkGate200BRequests: ~200-byte host requests accepted with a no-op handler.
func BenchmarkGate200BRequests(b *testing.B) {
	data, n := requestFrames(4096)
	benchGate(b, data, n)
}

// BenchmarkBufioLines200B: the baseline, the same bytes split by bufio.Reader.ReadSlice.
func BenchmarkBufioLines200B(b *testing.B) {
	data, n := requestFrames(4096)
	benchBufio(b, data, n, 64<<10)
}
