package daemon_test

import (
	"bufio"
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/daemon"
)

// BenchmarkCellAPIAfterIdle measures what an idle gap costs: a warm trivial cell through
// the API, and the physical baseline beside it, one JSON line's round trip to a minimal
// `-I -S` Python echo over pipes, each timed after an idle gap of 8 ms (about Jupyter's
// warm cell, which BenchmarkCellAPIOverJupyter interleaves) and again right after that
// (hot). api-idle/echo-idle says how many idle round trips between processes a
// cell after a gap costs; the *-idle/*-hot ratios say how much a gap slows each.
//
//	go test -run '^$' -bench CellAPIAfterIdle -benchtime 300x -count 3 ./daemon/
func BenchmarkCellAPIAfterIdle(b *testing.B) {
	const code = "x = 1\nx"
	r := serve(b, daemon.Options{})
	s := r.newSession(b)
	ctx := context.Background()
	cell := func() error { return runCellOne(ctx, r.c, s.ID, api.RunCell{Code: code}) }

	py := exec.Command("python3", "-I", "-S", "-c", "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line)\n    sys.stdout.flush()")
	in, err := py.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := py.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := py.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = py.Process.Kill(); _ = py.Wait() })
	lines := bufio.NewReader(out)
	echo := func() error {
		if _, err := in.Write([]byte(`{"x":1}` + "\n")); err != nil {
			return err
		}
		_, err := lines.ReadString('\n')
		return err
	}

	// Each iteration: per side, a gap, one run after it (idle), one right after that
	// (hot); the sides alternate which goes first.
	const gap = 8 * time.Millisecond
	names := []string{"api-idle", "api-hot", "echo-idle", "echo-hot"}
	runs := []func() error{cell, echo}
	lat := make([][]time.Duration, len(names))
	for i := range 20 + b.N {
		for j := range runs {
			side := (i + j) % len(runs)
			time.Sleep(gap)
			for k := range 2 {
				t0 := time.Now()
				if err := runs[side](); err != nil {
					b.Fatal(err)
				}
				if i >= 20 {
					lat[2*side+k] = append(lat[2*side+k], time.Since(t0))
				}
			}
		}
	}
	p50 := map[string]float64{}
	for k, name := range names {
		slices.Sort(lat[k])
		p50[name] = float64(lat[k][len(lat[k])/2].Nanoseconds()) / 1000
		b.ReportMetric(p50[name], name+"-p50-µs")
	}
	b.ReportMetric(p50["api-idle"]/p50["echo-idle"], "api-idle/echo-idle")
	b.ReportMetric(p50["api-idle"]/p50["api-hot"], "api-idle/api-hot")
	b.ReportMetric(p50["echo-idle"]/p50["echo-hot"], "echo-idle/echo-hot")
}
