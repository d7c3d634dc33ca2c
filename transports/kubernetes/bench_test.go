package kubernetes_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/transports"
	kube "github.com/kennel-dev/kennel/transports/kubernetes"
	"github.com/kennel-dev/kennel/transports/kubernetes/kubetest"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// BenchmarkStartToHelloVsKubectlRun is the acceptance's benchmark: in the same run, on the
// same cluster, each iteration times a kernel's Start until its hello has been read, and
// `kubectl run --rm -i --restart=Never --image IMAGE -- python3 -c pass` (a pod made,
// scheduled, run to its end through an attach, and deleted). It reports both and their
// ratio (goal <= 1.0). The kernel's own end (Kill, the pod's deletion) is not timed.
//
//	go test -run '^$' -bench StartToHelloVsKubectlRun -benchtime 10x ./transports/kubernetes/
func BenchmarkStartToHelloVsKubectlRun(b *testing.B) {
	c := kubetest.Cluster(b)
	tr := newTransport(b, kube.Options{})
	ctx := context.Background()
	kubectlRun := func(i int) time.Duration {
		t0 := time.Now()
		out, err := c.Kubectl(ctx, "-n", c.Namespace, "run", fmt.Sprintf("kennel-bench-run-%d", i+1), "--rm", "-i", "--restart=Never",
			"--image", c.Image, "--image-pull-policy=Never", "--command", "--", "python3", "-c", "pass")
		if err != nil {
			b.Fatalf("kubectl run: %v: %s", err, out)
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
	// One untimed round of each first: the image and the interpreter in the page cache.
	startToHello()
	kubectlRun(-1)
	var kennel, base time.Duration
	n := 0
	b.ResetTimer()
	for b.Loop() {
		kennel += startToHello()
		base += kubectlRun(n)
		n++
	}
	b.StopTimer()
	b.ReportMetric(float64(kennel.Milliseconds())/float64(n), "kennel-ms/op")
	b.ReportMetric(float64(base.Milliseconds())/float64(n), "kubectl-run-ms/op")
	b.ReportMetric(float64(kennel)/float64(base), "ratio")
}

// BenchmarkCellRoundTrip runs `pass` cells, execute to done, on one warm kernel: over its
// exec stream through the API server and the kubelet (attached), and over the link through
// the start exec's bridge (detached).
//
//	go test -run '^$' -bench CellRoundTrip -count 5 ./transports/kubernetes/
func BenchmarkCellRoundTrip(b *testing.B) {
	for _, bc := range []struct {
		name string
		o    kube.Options
	}{
		{"exec", kube.Options{}},
		{"detached", kube.Options{Detached: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			_, c := transporttest.Start(b, newTransport(b, bc.o), transports.Spec{Dir: "/tmp"})
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

// BenchmarkExecStreams measures how many exec streams one controller's client keeps open
// at once through the API server and the kubelet: N streams, each an exec of cat in a
// kernel's pod (up to 300 a pod, under the node's pid limit), opened together (each
// confirmed by a line's round trip), then each doing 20 line round trips at the same
// time. It reports the streams that opened, the time to open them all, the round trip's
// median and 99th percentile with N streams busy, and what each open stream costs in
// memory: the API server's, the kubelet's and the cluster's (every process of the test
// cluster, containerd's shims included) resident set, and this client's Go heap, against
// what they held before the first stream. A
// stream that fails to open is counted, not fatal: the limit is what is measured.
//
//	go test -run '^$' -bench ExecStreams -benchtime 1x ./transports/kubernetes/
func BenchmarkExecStreams(b *testing.B) {
	c := kubetest.Cluster(b)
	tr := newTransport(b, kube.Options{Memory: 2 << 30, MilliCPU: 200})
	counts := []int{1, 10, 50, 100, 200, 400, 800}
	var pods []string
	for len(pods)*300 < counts[len(counts)-1] {
		k, _ := transporttest.Start(b, tr, transports.Spec{Dir: "/tmp"})
		_, pod, _ := strings.Cut(k.Info().ID, "/")
		pods = append(pods, pod)
	}
	// Resident sets only grow back slowly once streams close: each N is measured against
	// the cluster before any stream.
	before := clusterMemory(c)
	for _, n := range counts {
		b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
			pods := pods[:(n+299)/300]
			for b.Loop() {
				res := execStreams(c, tr, pods, n, 20)
				after := res.mem
				sort.Slice(res.rtts, func(i, j int) bool { return res.rtts[i] < res.rtts[j] })
				b.ReportMetric(float64(res.opened), "opened")
				b.ReportMetric(float64(res.open.Milliseconds()), "open-all-ms")
				if len(res.rtts) > 0 {
					b.ReportMetric(float64(res.rtts[len(res.rtts)/2].Microseconds())/1000, "rtt-p50-ms")
					b.ReportMetric(float64(res.rtts[len(res.rtts)*99/100].Microseconds())/1000, "rtt-p99-ms")
				}
				if res.opened > 0 {
					per := func(a, b int64) float64 { return float64(a-b) / float64(res.opened) }
					b.ReportMetric(per(after.apiserver, before.apiserver), "apiserver-KiB/stream")
					b.ReportMetric(per(after.kubelet, before.kubelet), "kubelet-KiB/stream")
					b.ReportMetric(per(after.cluster, before.cluster), "cluster-KiB/stream")
					b.ReportMetric(per(after.heap, before.heap), "client-heap-KiB/stream")
				}
				if res.err != nil {
					b.Logf("%d of %d streams failed; the first: %v", n-res.opened, n, res.err)
				}
			}
		})
	}
}

// memory is what the test cluster's processes hold resident and this process's Go heap,
// in KiB.
type memory struct{ apiserver, kubelet, cluster, heap int64 }

// clusterMemory reads the resident sets of the cluster's processes: every process whose
// command line names the cluster's run directory.
func clusterMemory(c *kubetest.C) memory {
	var m memory
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	m.heap = int64(ms.HeapInuse >> 10)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(cmd, []byte(c.Dir)) {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var rss int64
		for _, l := range strings.Split(string(st), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
				rss, _ = strconv.ParseInt(f[1], 10, 64)
			}
		}
		m.cluster += rss
		name := filepath.Base(string(bytes.SplitN(cmd, []byte{0}, 2)[0]))
		switch name {
		case "kube-apiserver":
			m.apiserver += rss
		case "kubelet":
			m.kubelet += rss
		}
	}
	return m
}

type streamsResult struct {
	opened int
	open   time.Duration
	rtts   []time.Duration
	mem    memory // with every stream open
	err    error  // the first failure
}

// execStreams opens n exec streams of cat in pods at once (in turn), then has each do
// rounds line round trips, and closes them all.
func execStreams(c *kubetest.C, tr *kube.Transport, pods []string, n, rounds int) (res streamsResult) {
	var opened int
	var open time.Duration
	var rtts []time.Duration
	var first error
	var mu sync.Mutex
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	roundTrip := func(c io.ReadWriter, rd *bufio.Reader, i int) (time.Duration, error) {
		line := fmt.Sprintf("line %d\n", i)
		t0 := time.Now()
		if _, err := io.WriteString(c, line); err != nil {
			return 0, err
		}
		got, err := rd.ReadString('\n')
		if err != nil || got != line {
			return 0, fmt.Errorf("echo %q: %q, %v", line, got, err)
		}
		return time.Since(t0), nil
	}
	type stream struct {
		c  net.Conn
		rd *bufio.Reader
	}
	streams := make([]*stream, n)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, exit, err := kube.ExecInPod(tr, pods[i%len(pods)], []string{"cat"})
			if err != nil {
				fail(err)
				return
			}
			s := &stream{c: c, rd: bufio.NewReader(c)}
			_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
			if _, err := roundTrip(c, s.rd, -1); err != nil {
				c.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				code, xerr := exit(ctx)
				cancel()
				fail(fmt.Errorf("%w (the exec's end: %d, %v)", err, code, xerr))
				return
			}
			streams[i] = s
		}()
	}
	wg.Wait()
	open = time.Since(t0)
	for _, s := range streams {
		if s != nil {
			opened++
		}
	}
	for _, s := range streams {
		if s == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.c.SetDeadline(time.Now().Add(2 * time.Minute))
			for i := range rounds {
				d, err := roundTrip(s.c, s.rd, i)
				if err != nil {
					fail(err)
					return
				}
				mu.Lock()
				rtts = append(rtts, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	mem := clusterMemory(c)
	for _, s := range streams {
		if s != nil {
			s.c.Close()
		}
	}
	return streamsResult{opened: opened, open: open, rtts: rtts, mem: mem, err: first}
}
