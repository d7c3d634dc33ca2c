package containerd_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/transports"
	ctrd "github.com/kennel-dev/kennel/transports/containerd"
	"github.com/kennel-dev/kennel/transports/containerd/containerdtest"
)

// BenchmarkStartToHelloVsCtrRun is the acceptance's benchmark: in the same run, against the
// same (the test's own) containerd, each iteration times a kernel's Start until its hello
// has been read, and `ctr run --rm IMAGE ID python3 -c pass` (the ctr CLI: a container,
// its snapshot and task made, run to its end and removed). It reports both and their
// ratio (goal <= 1.0), under runc and, where runsc is on PATH, under gVisor (the runc
// shim running runsc, ctr's --runc-binary runsc). The kernel's own end (Kill, removal) is
// not timed.
//
//	go test -run '^$' -bench StartToHelloVsCtrRun -benchtime 20x ./transports/containerd/
func BenchmarkStartToHelloVsCtrRun(b *testing.B) {
	for _, rt := range []struct{ name, runtime string }{{"runc", ""}, {"gvisor", GVisor}} {
		b.Run(rt.name, func(b *testing.B) {
			d := containerdtest.Daemon(b)
			ctr := testneed.Tool(b, "ctr")
			if rt.runtime != "" {
				testneed.Tools(b, rt.runtime)
			}
			st, err := images.Stub()
			if err != nil {
				b.Fatal(err)
			}
			tr := newTransport(b, d.Client, ctrd.Options{Runtime: rt.runtime})
			ctx := context.Background()
			args := []string{"-a", d.Address, "-n", ctrd.Namespace, "run", "--rm"}
			if rt.runtime != "" {
				args = append(args, "--runc-binary", rt.runtime)
			}
			ctrRun := func(i int) time.Duration {
				t0 := time.Now()
				cmd := exec.Command(ctr, append(args, ctrd.Ref(st), fmt.Sprintf("kennel-bench-ctr-%d", i+1), "python3", "-c", "pass")...)
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("ctr run: %v: %s", err, out)
				}
				return time.Since(t0)
			}
			startToHello := func() time.Duration {
				t0 := time.Now()
				k, err := tr.Start(ctx, transports.Spec{SessionID: "bench", Dir: "/tmp"})
				if err != nil {
					b.Fatal(err)
				}
				rd := bufio.NewReader(k.Stdout())
				line, err := rd.ReadString('\n')
				if err != nil || !strings.Contains(line, `"hello"`) {
					b.Fatalf("no hello: %q, %v", line, err)
				}
				took := time.Since(t0)
				go func() { _, _ = io.Copy(io.Discard, rd) }()
				_ = k.Kill(ctx)
				_, _ = k.Wait()
				return took
			}
			// One untimed round of each first: the image unpacked, the shim binaries
			// and the interpreter in the page cache.
			startToHello()
			ctrRun(-1)
			var kennel, base time.Duration
			n := 0
			b.ResetTimer()
			for b.Loop() {
				kennel += startToHello()
				base += ctrRun(n)
				n++
			}
			b.StopTimer()
			b.ReportMetric(float64(kennel.Milliseconds())/float64(n), "kennel-ms/op")
			b.ReportMetric(float64(base.Milliseconds())/float64(n), "ctr-run-ms/op")
			b.ReportMetric(float64(kennel)/float64(base), "ratio")
		})
	}
}
