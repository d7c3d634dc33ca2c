package transporttest

import (
	"bufio"
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/transports"
)

// BenchStartToHello times tr's Start until the kernel's first line (its hello) has been
// read, in a fresh directory; the end of each kernel (stdin closed, Wait, Stdout drained)
// is not timed. One untimed start first warms the transport's caches (a resolved
// interpreter, an unpacked bundle). Two transports compared with it run the same code.
func BenchStartToHello(b *testing.B, tr transports.Transport) {
	dir := b.TempDir()
	startToHello(b, tr, dir)
	b.ResetTimer()
	for b.Loop() {
		startToHello(b, tr, dir)
	}
}

func startToHello(b *testing.B, tr transports.Transport, dir string) {
	k, err := tr.Start(context.Background(), transports.Spec{SessionID: "bench", Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	line, err := bufio.NewReader(k.Stdout()).ReadSlice('\n')
	if err != nil || len(line) < 10 {
		b.Fatalf("hello: %q, %v", line, err)
	}
	b.StopTimer()
	_ = k.Stdin().Close()
	if _, err := k.Wait(); err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, k.Stdout())
	b.StartTimer()
}

// BenchHandOut times a warm pool's hand-out beside a cold start: each iteration starts
// one kernel on pooled (a transport whose pool has a ready kernel of spec's description:
// ready waits for that, off the timer) and one on cold, alternating which goes first,
// each from Start to its hello; both are killed off the timer. It reports each side's
// median in ms and their ratio (handout/cold), and fails if a pooled start was not a
// hand-out.
func BenchHandOut(b *testing.B, pooled, cold transports.Transport, spec transports.Spec, ready func()) {
	ctx := context.Background()
	start := func(tr transports.Transport) (transports.Kernel, time.Duration) {
		began := time.Now()
		k, err := tr.Start(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := NewClient(k).Hello(); err != nil {
			b.Fatal(err)
		}
		return k, time.Since(began)
	}
	var hand, coldT []time.Duration
	i := 0
	for b.Loop() {
		b.StopTimer()
		ready()
		b.StartTimer()
		var kp, kc transports.Kernel
		var dp, dc time.Duration
		if i%2 == 0 {
			kp, dp = start(pooled)
			kc, dc = start(cold)
		} else {
			kc, dc = start(cold)
			kp, dp = start(pooled)
		}
		i++
		b.StopTimer()
		if kp.Info().Pool != transports.PoolHit {
			b.Fatalf("the pooled start was a %q", kp.Info().Pool)
		}
		hand, coldT = append(hand, dp), append(coldT, dc)
		for _, k := range []transports.Kernel{kp, kc} {
			_ = k.Kill(ctx)
			_, _ = k.Wait()
		}
		b.StartTimer()
	}
	mh, mc := median(hand), median(coldT)
	b.ReportMetric(float64(mh.Microseconds())/1000, "handout-ms")
	b.ReportMetric(float64(mc.Microseconds())/1000, "cold-ms")
	b.ReportMetric(float64(mh)/float64(mc), "handout/cold")
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
