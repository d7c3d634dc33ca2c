package local_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/procfs"
	"github.com/kennel-dev/kennel/link"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// BenchmarkLocalStartToHello measures Start until the hello frame has been read, with the
// interpreter resolved and the bundle unpacked beforehand (once per Transport). Its
// baseline is BenchmarkPythonPass: the same interpreter running `-c pass`.
func BenchmarkLocalStartToHello(b *testing.B) {
	transporttest.BenchStartToHello(b, newTransport(b))
}

// BenchmarkPythonPass is the baseline of BenchmarkLocalStartToHello: the resolved
// interpreter started by os/exec to run `-c pass`, until it has exited.
func BenchmarkPythonPass(b *testing.B) {
	p := needPython(b)
	for b.Loop() {
		if err := exec.Command(p, "-c", "pass").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCellRoundTrip runs `pass` cells, execute to done, on one warm kernel: over
// stdio (protocol 1, the reaper's pipes) and over a detached kernel's link (protocol 2,
// its socket and both outboxes). The ratio link/stdio is the cost of the session layer.
func BenchmarkCellRoundTrip(b *testing.B) {
	for _, bc := range []struct {
		name string
		tr   func(b *testing.B) transports.Transport
	}{
		{"stdio", func(b *testing.B) transports.Transport { return newTransport(b) }},
		{"link", func(b *testing.B) transports.Transport { return newDetached(b, 0) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			_, c := transporttest.Start(b, bc.tr(b), transports.Spec{Dir: b.TempDir()})
			if _, err := c.Run("pass"); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, _, err := c.Execute("pass"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReattach measures a reattach to a running detached kernel whose outbox holds
// at least 1000 frames nobody acknowledged: dial, attach, hello, and the resend of every
// frame up to the cell's done. Each round starts a cell that, once its link is detached,
// prints 1000 lines (one stream frame each); the timed part is a fresh link.Client
// taking all of them. Reported: the median over the rounds (ms) and the frames resent.
func BenchmarkReattach(b *testing.B) {
	tr := newDetached(b, 0)
	k, c := transporttest.Start(b, tr, transports.Spec{Dir: b.TempDir()})
	if _, err := c.Run("import sys, time"); err != nil {
		b.Fatal(err)
	}
	rec := k.(transports.Detachable).Record()
	first := k.(interface{ Link() *link.Client }).Link()
	// The first link only starts the cell; each round's cell goes out on a fresh link.
	send := func(cl *link.Client, id string) {
		code := "time.sleep(0.2)\nfor i in range(1000): sys.stdout.write('%d\\n' % i)"
		line := fmt.Sprintf(`{"type":"execute","id":%q,"code":%q}`+"\n", id, code)
		if _, err := cl.Send().Write([]byte(line)); err != nil {
			b.Fatal(err)
		}
	}
	var times []time.Duration
	frames := 0
	cl := first
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("r%d", i)
		send(cl, id)
		time.Sleep(50 * time.Millisecond) // the execute is applied (acknowledged at once)
		if err := cl.Close(); err != nil {
			b.Fatal(err)
		}
		time.Sleep(600 * time.Millisecond) // the cell's 1000 frames wait in the outbox
		b.StartTimer()
		start := time.Now()
		var err error
		cl, err = link.Open(context.Background(), link.Options{Kernel: rec.Kernel, Token: rec.Token, Grace: time.Hour, Dial: link.DialUnix(filepath.Join(rec.RunDir, "kernel.sock"))})
		if err != nil {
			log, _ := os.ReadFile(filepath.Join(rec.RunDir, "kernel.log"))
			b.Fatalf("round %d: %v; kernel.log:\n%s", i, err, log)
		}
		n := 0
		sc := bufio.NewScanner(cl.Frames())
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			n++
			if bytes.HasPrefix(sc.Bytes(), []byte(`{"event":"done","id":"`+id+`"`)) {
				break
			}
		}
		times = append(times, time.Since(start))
		b.StopTimer()
		if n < 1000 {
			b.Fatalf("reattach got %d frames, want at least 1000", n)
		}
		frames = n
	}
	cl.Close()
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(frames), "frames")
}

// BenchmarkIdleKernelRSS reports the resident memory of one idle kernel and whatever
// holds it: over stdio, the stub plus its Go reaper; detached, the stub alone (it is its
// own subreaper). VmRSS from /proc, in MiB, after a first cell.
func BenchmarkIdleKernelRSS(b *testing.B) {
	for _, bc := range []struct {
		name string
		tr   func(b *testing.B) transports.Transport
	}{
		{"stdio", func(b *testing.B) transports.Transport { return newTransport(b) }},
		{"detached", func(b *testing.B) transports.Transport { return newDetached(b, 0) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var kib int
			for b.Loop() {
				k, c := transporttest.Start(b, bc.tr(b), transports.Spec{Dir: b.TempDir()})
				if _, err := c.Run("pass"); err != nil {
					b.Fatal(err)
				}
				time.Sleep(300 * time.Millisecond)
				pid := k.Info().PID
				kib = vmRSS(b, pid)
				if st, err := procfs.Read(pid); err == nil && bc.name == "stdio" {
					kib += vmRSS(b, st.PPID) // the reaper
				}
				transporttest.Stop(b, k)
			}
			b.ReportMetric(float64(kib)/1024, "MiB")
		})
	}
}

func vmRSS(b *testing.B, pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.Fields(rest)[0])
			return n
		}
	}
	b.Fatalf("no VmRSS for %d", pid)
	return 0
}
