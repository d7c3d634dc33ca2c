package daemon_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/daemon"
	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports/local"
)

// reportLatency reports the median and p99 of lat as metrics of b.
func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkCellThroughAPI runs one small cell per iteration through the daemon's API
// (HTTP on its unix socket, a JSON reply).
func BenchmarkCellThroughAPI(b *testing.B) {
	r := serve(b, daemon.Options{})
	s := r.newSession(b)
	ctx := context.Background()
	req := api.RunCell{Code: "x = 1\nx"}
	for range 20 {
		if _, err := r.c.RunCell(ctx, s.ID, req); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		rep, err := r.c.RunCell(ctx, s.ID, req)
		lat = append(lat, time.Since(t0))
		if err != nil || rep.Cell == nil || *rep.Cell.Result != "1" {
			b.Fatalf("%+v %v", rep, err)
		}
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkCellThroughGoAPI is the baseline: the same cell through
// controller.Session.Execute in this process.
func BenchmarkCellThroughGoAPI(b *testing.B) {
	bundle, err := images.Stub()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	s, err := controller.Start(ctx, controller.Options{
		Transport: local.New(local.Options{}), Dir: b.TempDir(), Bundle: bundle.Hash(), StateDir: b.TempDir() + "/state",
	})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(ctx)
	for range 20 {
		if _, err := s.Execute(ctx, "x = 1\nx", nil); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		res, err := s.Execute(ctx, "x = 1\nx", nil)
		lat = append(lat, time.Since(t0))
		if err != nil || *res.Result != "1" {
			b.Fatalf("%+v %v", res, err)
		}
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkCellThroughGoAPIWait is the baseline of the same call the API makes: the cell
// through controller.Session.ExecuteWait with the API's default budget (60 s), so that it could
// detach as a job, in this process.
func BenchmarkCellThroughGoAPIWait(b *testing.B) {
	bundle, err := images.Stub()
	if err != nil {
		b.Fatal(err)
	}
	s, err := controller.Start(context.Background(), controller.Options{
		Transport: local.New(local.Options{}), Dir: b.TempDir(), Bundle: bundle.Hash(), StateDir: b.TempDir() + "/state",
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	defer s.Close(ctx)
	run := func() (*controller.CellResult, error) {
		jw, err := s.ExecuteWait(ctx, "x = 1\nx", 60*time.Second, nil)
		if err != nil {
			return nil, err
		}
		return jw.Cell, jw.Err
	}
	for range 20 {
		if _, err := run(); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		res, err := run()
		lat = append(lat, time.Since(t0))
		if err != nil || res == nil || *res.Result != "1" {
			b.Fatalf("%+v %v", res, err)
		}
	}
	b.StopTimer()
	reportLatency(b, lat)
}
