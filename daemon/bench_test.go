package daemon_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/client"
	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/daemon"
	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports/local"
)

// startSession starts a session on a local kernel in this process, closed at cleanup.
func startSession(b *testing.B) *controller.Session {
	b.Helper()
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
	b.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// measureCells runs run 20 times to warm up, then b.N times timed one by one, and reports
// their latency; an error of any run fails b.
func measureCells(b *testing.B, run func() error) {
	b.Helper()
	for range 20 {
		if err := run(); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		err := run()
		lat = append(lat, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportLatency(b, lat)
}

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
	measureCells(b, func() error {
		rep, err := r.c.RunCell(ctx, s.ID, req)
		if err != nil || rep.Cell == nil || rep.Cell.Result == nil || *rep.Cell.Result != "1" {
			return fmt.Errorf("%+v %v", rep, err)
		}
		return nil
	})
}

// BenchmarkCellThroughAPIFromAnotherProcess is BenchmarkCellThroughAPI with the client in
// a process of its own, as an operator's program is: this test binary started again as a
// client (apiClientMain), which runs b.N cells and prints each one's latency.
func BenchmarkCellThroughAPIFromAnotherProcess(b *testing.B) {
	r := serve(b, daemon.Options{})
	s := r.newSession(b)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), apiClientEnv+"="+r.socket+"\x1f"+s.ID+"\x1f"+strconv.Itoa(b.N))
	cmd.Stderr = os.Stderr
	b.ResetTimer()
	out, err := cmd.Output()
	b.StopTimer()
	if err != nil {
		b.Fatalf("client: %v", err)
	}
	var lat []time.Duration
	for _, f := range strings.Fields(string(out)) {
		ns, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			b.Fatalf("client printed %q", f)
		}
		lat = append(lat, time.Duration(ns))
	}
	if len(lat) != b.N {
		b.Fatalf("client reported %d cells, want %d", len(lat), b.N)
	}
	reportLatency(b, lat)
}

// apiClientEnv, when set ("socket\x1fsession\x1fn"), makes the test binary an API client
// for BenchmarkCellThroughAPIFromAnotherProcess.
const apiClientEnv = "KENNEL_BENCH_API_CLIENT"

// apiClientMain runs 20 cells to warm up, then n cells, through the API on the socket,
// and prints each one's latency in nanoseconds, one a line. It returns the exit code.
func apiClientMain(v string) int {
	parts := strings.Split(v, "\x1f")
	n, err := strconv.Atoi(parts[len(parts)-1])
	if len(parts) != 3 || err != nil {
		fmt.Fprintf(os.Stderr, "bad %s=%q\n", apiClientEnv, v)
		return 2
	}
	c := client.New(parts[0])
	ctx := context.Background()
	req := api.RunCell{Code: "x = 1\nx"}
	lat := make([]time.Duration, 0, n)
	for i := range 20 + n {
		t0 := time.Now()
		rep, err := c.RunCell(ctx, parts[1], req)
		if i >= 20 {
			lat = append(lat, time.Since(t0))
		}
		if err != nil || rep.Cell == nil || rep.Cell.Result == nil || *rep.Cell.Result != "1" {
			fmt.Fprintf(os.Stderr, "cell: %+v %v\n", rep, err)
			return 1
		}
	}
	w := bufio.NewWriter(os.Stdout)
	for _, d := range lat {
		fmt.Fprintln(w, d.Nanoseconds())
	}
	if err := w.Flush(); err != nil {
		return 1
	}
	return 0
}

// BenchmarkCellThroughMinimalHandler is the floor of any HTTP API over a session: the same
// client call as BenchmarkCellThroughAPI, served by a bare net/http handler on a unix
// socket that decodes the request, calls Session.Execute and encodes the reply (no
// daemon: no registry, jobs, budget, metrics or peer check).
func BenchmarkCellThroughMinimalHandler(b *testing.B) {
	s := startSession(b)
	ctx := context.Background()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sessions/{id}/cells", func(w http.ResponseWriter, r *http.Request) {
		var req api.RunCell
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		res, err := s.Execute(r.Context(), req.Code, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(api.CellReply{State: "settled", Job: "j1", Cell: &api.Cell{ID: res.ID, Status: res.Status, Result: res.Result}})
	})
	sock := filepath.Join(b.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	defer srv.Close()
	c := client.New(sock)
	req := api.RunCell{Code: "x = 1\nx"}
	measureCells(b, func() error {
		rep, err := c.RunCell(ctx, "s", req)
		if err == nil && (rep.Cell == nil || rep.Cell.Result == nil || *rep.Cell.Result != "1") {
			err = fmt.Errorf("reply %+v", rep)
		}
		return err
	})
}

// BenchmarkCellThroughGoAPI is the baseline: the same cell through
// controller.Session.Execute in this process.
func BenchmarkCellThroughGoAPI(b *testing.B) {
	s := startSession(b)
	ctx := context.Background()
	measureCells(b, func() error {
		res, err := s.Execute(ctx, "x = 1\nx", nil)
		if err != nil || res.Result == nil || *res.Result != "1" {
			return fmt.Errorf("%+v %v", res, err)
		}
		return nil
	})
}

// BenchmarkCellThroughGoAPIWait is the baseline of the same call the API makes: the cell
// through controller.Session.ExecuteWait with the API's default budget (60 s), so that it could
// detach as a job, in this process.
func BenchmarkCellThroughGoAPIWait(b *testing.B) {
	s := startSession(b)
	ctx := context.Background()
	measureCells(b, func() error {
		jw, err := s.ExecuteWait(ctx, "x = 1\nx", 60*time.Second, nil)
		if err == nil {
			err = jw.Err
		}
		if err != nil || jw.Cell == nil || jw.Cell.Result == nil || *jw.Cell.Result != "1" {
			return fmt.Errorf("%+v %v", jw.Cell, err)
		}
		return nil
	})
}
