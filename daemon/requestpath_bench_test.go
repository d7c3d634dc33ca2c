package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/client"
	"github.com/kennel-dev/kennel/output"
)

// BenchmarkRequestPathOverBareHandler measures what the daemon's request path costs
// apart from any kernel: the same client's cell request served on a unix socket by the
// daemon's stack (the connection's write-stall wrapper, the router over the whole route
// table, the body deadline, readJSON with the cell route's limit, the cell handler's
// header checks, a reply built by replyOf's helpers and written by writeJSON), and by a
// bare ServeMux handler that decodes the request and encodes a reply of the same
// fields; no session behind either. One of each per iteration, alternating; it reports
// their medians and daemon/bare.
func BenchmarkRequestPathOverBareHandler(b *testing.B) {
	result := "1"
	cell := func() api.CellReply {
		return api.CellReply{State: "settled", Job: "j1", CellID: "c1", Output: toOutput(output.Result{}), Cell: &api.Cell{ID: "c1", Status: "ok", Result: &result}}
	}
	var rs []route
	for _, rt := range (&Server{}).routes() {
		if rt.method == "POST" && rt.pattern == "/sessions/{id}/cells" {
			rt.handler = func(w http.ResponseWriter, r *http.Request) {
				if r.PathValue("id") == "" {
					writeError(w, errNotFound)
					return
				}
				var req api.RunCell
				if err := readJSON(w, r, maxCodeBody, &req); err != nil {
					writeError(w, err)
					return
				}
				_ = budgetOf(req.BudgetMS)
				if len(r.Header.Get(api.HeaderIdempotencyKey)) > 256 || wantsNDJSON(r) {
					writeError(w, errInvalid)
					return
				}
				writeJSON(w, http.StatusOK, cell())
			}
		}
		rs = append(rs, rt)
	}
	daemonSide := serveOn(b, stallListener{stall: DefaultWriteStall}, &http.Server{
		Handler: bodyDeadline(newRouter(rs), DefaultBodyTimeout), ReadHeaderTimeout: DefaultHeaderTimeout,
		IdleTimeout: DefaultIdleTimeout, DisableGeneralOptionsHandler: true,
	})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sessions/{id}/cells", func(w http.ResponseWriter, r *http.Request) {
		var req api.RunCell
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(cell())
	})
	bare := serveOn(b, stallListener{}, &http.Server{Handler: mux})

	ctx := context.Background()
	req := api.RunCell{Code: "x = 1\nx"}
	run := func(c *client.Client) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			t0 := time.Now()
			rep, err := c.RunCell(ctx, "s", req)
			d := time.Since(t0)
			if err == nil && (rep.Cell == nil || rep.Cell.Result == nil || *rep.Cell.Result != "1") {
				err = fmt.Errorf("reply %+v", rep)
			}
			return d, err
		}
	}
	da, ba := run(daemonSide), run(bare)
	for range 200 {
		if _, err := da(); err != nil {
			b.Fatal(err)
		}
		if _, err := ba(); err != nil {
			b.Fatal(err)
		}
	}
	ld := make([]time.Duration, 0, b.N)
	lb := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	timed := func(run func() (time.Duration, error), lat *[]time.Duration) {
		d, err := run()
		if err != nil {
			b.Fatal(err)
		}
		*lat = append(*lat, d)
	}
	for i := range b.N {
		if i%2 == 0 {
			timed(da, &ld)
			timed(ba, &lb)
		} else {
			timed(ba, &lb)
			timed(da, &ld)
		}
	}
	b.StopTimer()
	slices.Sort(ld)
	slices.Sort(lb)
	md, mb := ld[len(ld)/2], lb[len(lb)/2]
	b.ReportMetric(float64(md.Nanoseconds())/1e3, "daemon-p50-µs")
	b.ReportMetric(float64(mb.Nanoseconds())/1e3, "bare-p50-µs")
	b.ReportMetric(float64(md)/float64(mb), "daemon/bare")
}

// serveOn serves hs on a fresh unix socket, through wrap's Accept when wrap has a
// stall (a stallListener around the socket), until cleanup, and returns a client of it.
func serveOn(b *testing.B, wrap stallListener, hs *http.Server) *client.Client {
	b.Helper()
	sock := filepath.Join(b.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	var sl net.Listener = l
	if wrap.stall > 0 {
		wrap.Listener = l
		sl = wrap
	}
	go func() { _ = hs.Serve(sl) }()
	c := client.New(sock)
	b.Cleanup(func() {
		c.Close()
		_ = hs.Close()
	})
	return c
}
