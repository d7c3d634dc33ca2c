package gate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
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

// streamFrame is a stream frame of size bytes as the stub writes it (json.dumps, ASCII):
// log lines of about 80 bytes, each ended by an escaped newline, a quoted word now and
// then. escaped makes it escape-heavy instead: four escapes a line (\u00e9, two \", \n).
func streamFrame(size int, id string, escaped bool) []byte {
	pre := `{"event": "stream", "id": "` + id + `", "name": "stdout", "text": "`
	post := "\"}\n"
	lines := []string{
		`2026-11-30 00:12:01 INFO train step=12345 loss=0.0421 acc=0.9876 lr=3.0e-04\n`,
		`2026-11-30 00:12:01 INFO eval  step=12345 split=valid f1=0.8812 n=20000\n`,
		`2026-11-30 00:12:02 WARN data  skipped record 8812: field \"label\" is empty\n`,
	}
	if escaped {
		lines = []string{`[INFO] step 12345 loss=0.0421 accuracy=0.9876 lr=3e-4 tokens/s=12\u00e9456 \"ok\"\n`}
	}
	var sb strings.Builder
	sb.WriteString(pre)
	for i := 0; sb.Len()+len(lines[i%len(lines)])+len(post) <= size; i++ {
		sb.WriteString(lines[i%len(lines)])
	}
	for sb.Len()+len(post) < size {
		sb.WriteByte('x')
	}
	sb.WriteString(post)
	return []byte(sb.String())
}

// displayFrame is a display frame of size bytes: a PNG as base64, with its text/plain.
func displayFrame(size int, id string) []byte {
	pre := `{"event": "display", "id": "` + id + `", "data": {"text/plain": "<Figure size 640x480 with 1 Axes>", "image/png": "`
	post := "\"}}\n"
	png := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x02\x80"), size))
	return []byte(pre + png[:size-len(pre)-len(post)] + post)
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
	frames := 0
	g := New(Config{
		Serves:    func(string) bool { return true },
		OnRequest: func(Request) { frames++ },
		OnRefusal: func(r Refusal) { b.Fatalf("refused %+v", r) },
		OnEvent:   func(Frame) { frames++ },
	})
	b.ResetTimer()
	start := cpuTime()
	if err := g.Run(context.Background(), &repeatReader{data: data, left: b.N * frameLen}); err != nil {
		b.Fatal(err)
	}
	reportCPU(b, start)
	if frames != b.N {
		b.Fatalf("%d frames decided, want %d", frames, b.N)
	}
}

func benchBufio(b *testing.B, data []byte, frameLen int, bufSize int) {
	b.SetBytes(int64(frameLen))
	b.ReportAllocs()
	b.ResetTimer()
	start := cpuTime()
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
		if len(line) == frameLen {
			lines++
		}
	}
	reportCPU(b, start)
	if lines != b.N {
		b.Fatalf("%d lines split, want %d", lines, b.N)
	}
}

// frames1MiB is the output of a cell as the kernel frames it: 1 MiB stream frames of
// log text and 1 MiB display frames of a PNG, alternating.
func frames1MiB() []byte {
	var data []byte
	for _, id := range []string{"c1", "c2"} {
		data = append(data, streamFrame(1<<20, id, false)...)
		data = append(data, displayFrame(1<<20, id)...)
	}
	return data
}

// escapedFrames1MiB is 1 MiB stream frames of escape-heavy text (an escape every 20 bytes).
func escapedFrames1MiB() []byte {
	return append(streamFrame(1<<20, "c1", true), streamFrame(1<<20, "c2", true)...)
}

// BenchmarkGate1MiBFrames: 1 MiB stream and display frames through the gate (split,
// validate, head, OnEvent).
func BenchmarkGate1MiBFrames(b *testing.B) { benchGate(b, frames1MiB(), 1<<20) }

// BenchmarkBufioLines1MiB: the baseline, the same bytes split by bufio.Reader.ReadSlice.
func BenchmarkBufioLines1MiB(b *testing.B) { benchBufio(b, frames1MiB(), 1<<20, 4<<20) }

// BenchmarkGate1MiBEscapedText: the gate's worst realistic case, text with an escape
// every 20 bytes.
func BenchmarkGate1MiBEscapedText(b *testing.B) { benchGate(b, escapedFrames1MiB(), 1<<20) }

// BenchmarkBufioLines1MiBEscapedText: its baseline.
func BenchmarkBufioLines1MiBEscapedText(b *testing.B) {
	benchBufio(b, escapedFrames1MiB(), 1<<20, 4<<20)
}

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

// requestHead is what an ordinary Go host decodes of a host request before dispatching
// it: the head's keys. encoding/json still validates the whole line (Unmarshal checks
// it before decoding) and skips "args".
type requestHead struct {
	Event string `json:"event"`
	ID    string `json:"id"`
	Type  string `json:"type"`
	Cell  string `json:"cell"`
}

// BenchmarkReadSliceUnmarshal200B is the baseline issue 20 names for
// BenchmarkGate200BRequests: what an ordinary Go implementation does with each line,
// bufio.Reader.ReadSlice and encoding/json.Unmarshal of the head into a struct (no id
// set, no limits, no refusals: less than the gate decides). The report gives the gate's
// throughput over this one's, from the same run.
func BenchmarkReadSliceUnmarshal200B(b *testing.B) {
	data, frameLen := requestFrames(4096)
	b.SetBytes(int64(frameLen))
	b.ReportAllocs()
	b.ResetTimer()
	start := cpuTime()
	br := bufio.NewReaderSize(&repeatReader{data: data, left: b.N * frameLen}, 64<<10)
	requests := 0
	var h requestHead
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		h = requestHead{}
		if err := json.Unmarshal(line, &h); err != nil {
			b.Fatal(err)
		}
		if h.Event == eventHostRequest && h.ID != "" && h.Type != "" {
			requests++
		}
	}
	reportCPU(b, start)
	if requests != b.N {
		b.Fatalf("%d requests decoded, want %d", requests, b.N)
	}
}
