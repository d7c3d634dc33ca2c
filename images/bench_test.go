package images

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Start-up: BenchmarkStartToHello against the same interpreter's BenchmarkPythonPass
// (`-I -S -c pass`; target ratio <= 1.3). Round trip: BenchmarkCellRoundTrip (a warm
// kernel, cell "1+1") against BenchmarkEchoRoundTrip (target ratio <= 2). The *Vs*
// benchmarks run both sides in alternating batches and report the ratio directly, which
// holds up on a loaded machine:
//
//	go test -run '^$' -bench 'StartToHello|PythonPass|RoundTrip' ./images/

func BenchmarkStartToHello(b *testing.B) {
	python := needPython(b)
	bundle, dir := stubDir(b)
	argv := KernelArgv(python, dir)
	env := append(os.Environ(), KernelEnv(bundle)...)
	// One warm-up start writes the stub's __pycache__.
	startHello(b, argv, env)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		startHello(b, argv, env)
	}
}

// startHello starts a kernel, reads its hello (timed) and ends it (not timed).
func startHello(b *testing.B, argv, env []string) {
	end := untilHello(b, argv, env)
	b.StopTimer()
	end()
	b.StartTimer()
}

// untilHello starts a kernel and reads its hello; end closes its stdin and waits for it.
func untilHello(b *testing.B, argv, env []string) (end func()) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err != nil || len(line) < 20 {
		b.Fatalf("hello: %q, %v", line, err)
	}
	return func() {
		stdin.Close()
		io.Copy(io.Discard, stdout)
		cmd.Wait()
	}
}

func BenchmarkPythonPass(b *testing.B) {
	python := needPython(b)
	for i := 0; i < b.N; i++ {
		if err := exec.Command(python, "-I", "-S", "-c", "pass").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// roundTrip sends b.N frames to a warm process and reads each answer.
type roundTrip struct {
	stdin io.WriteCloser
	out   *bufio.Reader
	cmd   *exec.Cmd
}

func startRoundTrip(b *testing.B, argv, env []string) *roundTrip {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	rt := &roundTrip{stdin: stdin, out: bufio.NewReaderSize(stdout, 1<<16), cmd: cmd}
	b.Cleanup(func() {
		stdin.Close()
		io.Copy(io.Discard, stdout)
		cmd.Wait()
	})
	return rt
}

// call writes one execute frame and reads lines until the done line of that id.
func (rt *roundTrip) call(b *testing.B, id string) {
	frame := `{"type":"execute","id":"` + id + `","code":"1+1"}` + "\n"
	if _, err := io.WriteString(rt.stdin, frame); err != nil {
		b.Fatal(err)
	}
	want := `{"event":"done","id":"` + id + `"`
	for {
		line, err := rt.out.ReadSlice('\n')
		if err != nil {
			b.Fatal(err)
		}
		if len(line) >= len(want) && string(line[:len(want)]) == want {
			return
		}
	}
}

func benchRoundTrip(b *testing.B, rt *roundTrip) {
	for i := 0; i < 200; i++ { // warm up
		rt.call(b, "w"+strconv.Itoa(i))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rt.call(b, strconv.Itoa(i))
	}
}

func BenchmarkCellRoundTrip(b *testing.B) {
	python := needPython(b)
	bundle, dir := stubDir(b)
	rt := startRoundTrip(b, KernelArgv(python, dir), append(os.Environ(), KernelEnv(bundle)...))
	if _, err := rt.out.ReadSlice('\n'); err != nil { // hello
		b.Fatal(err)
	}
	benchRoundTrip(b, rt)
}

// echoProgram is the baseline: a minimal -I -S Python that answers each JSON line with
// one JSON line over the same pipes.
const echoProgram = `import sys, json
r = sys.stdin.buffer
w = sys.stdout.buffer
for line in r:
    m = json.loads(line)
    w.write(json.dumps({"event": "done", "id": m["id"], "status": "ok"}, separators=(",", ":")).encode() + b"\n")
    w.flush()
`

func BenchmarkEchoRoundTrip(b *testing.B) {
	python := needPython(b)
	rt := startRoundTrip(b, []string{python, "-I", "-S", "-c", echoProgram}, os.Environ())
	benchRoundTrip(b, rt)
}

// The interleaved benchmarks run a measured operation and its baseline in alternating
// batches, so both see the same load on a shared machine, and report the ratio.

func BenchmarkStartToHelloVsPythonPass(b *testing.B) {
	python := needPython(b)
	bundle, dir := stubDir(b)
	argv := KernelArgv(python, dir)
	env := append(os.Environ(), KernelEnv(bundle)...)
	startHello(b, argv, env)
	b.ResetTimer() // ns/op is the sum of both sides; the metrics split it
	var kernel, pass time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		end := untilHello(b, argv, env)
		kernel += time.Since(t0)
		end()

		t0 = time.Now()
		if err := exec.Command(python, "-I", "-S", "-c", "pass").Run(); err != nil {
			b.Fatal(err)
		}
		pass += time.Since(t0)
	}
	b.ReportMetric(float64(kernel.Nanoseconds())/float64(b.N), "hello-ns/op")
	b.ReportMetric(float64(pass.Nanoseconds())/float64(b.N), "pass-ns/op")
	b.ReportMetric(float64(kernel)/float64(pass), "ratio")
}

func BenchmarkCellVsEchoRoundTrip(b *testing.B) {
	python := needPython(b)
	bundle, dir := stubDir(b)
	cell := startRoundTrip(b, KernelArgv(python, dir), append(os.Environ(), KernelEnv(bundle)...))
	if _, err := cell.out.ReadSlice('\n'); err != nil {
		b.Fatal(err)
	}
	echo := startRoundTrip(b, []string{python, "-I", "-S", "-c", echoProgram}, os.Environ())
	for i := 0; i < 200; i++ {
		cell.call(b, "w"+strconv.Itoa(i))
		echo.call(b, "w"+strconv.Itoa(i))
	}
	b.ResetTimer() // ns/op is the sum of both sides; the metrics split it
	const batch = 100
	var tc, te time.Duration
	n := 0
	for n < b.N {
		k := min(batch, b.N-n)
		t0 := time.Now()
		for j := 0; j < k; j++ {
			cell.call(b, strconv.Itoa(n+j))
		}
		tc += time.Since(t0)
		t0 = time.Now()
		for j := 0; j < k; j++ {
			echo.call(b, strconv.Itoa(n+j))
		}
		te += time.Since(t0)
		n += k
	}
	b.ReportMetric(float64(tc.Nanoseconds())/float64(b.N), "cell-ns/op")
	b.ReportMetric(float64(te.Nanoseconds())/float64(b.N), "echo-ns/op")
	b.ReportMetric(float64(tc)/float64(te), "ratio")
}
