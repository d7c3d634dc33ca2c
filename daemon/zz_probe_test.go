package daemon_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports/local"
)

func BenchmarkProbeExecuteWait(b *testing.B) {
	bundle, _ := images.Stub()
	ctx := context.Background()
	s, err := controller.Start(ctx, controller.Options{Transport: local.New(local.Options{}), Dir: b.TempDir(), Bundle: bundle.Hash(), StateDir: b.TempDir() + "/state"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(ctx)
	lat := make([]time.Duration, 0, b.N)
	for range b.N {
		t0 := time.Now()
		_, err := s.ExecuteWait(ctx, "x = 1\nx", time.Minute, nil)
		lat = append(lat, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
}
