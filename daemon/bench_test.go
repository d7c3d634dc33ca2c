package daemon_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/launch"
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
	c := serveMinimalHandler(b)
	ctx := context.Background()
	req := api.RunCell{Code: "x = 1\nx"}
	measureCells(b, func() error { return runCellOne(ctx, c, "s", req) })
}

// runCellOne runs req through c in session id and checks that its result is "1".
func runCellOne(ctx context.Context, c *client.Client, id string, req api.RunCell) error {
	rep, err := c.RunCell(ctx, id, req)
	if err == nil && (rep.Cell == nil || rep.Cell.Result == nil || *rep.Cell.Result != "1") {
		err = fmt.Errorf("reply %+v", rep)
	}
	return err
}

// serveMinimalHandler serves a bare net/http handler over Session.Execute of a local
// kernel on a fresh unix socket (any session id), stopped at cleanup, and returns a
// client of it.
func serveMinimalHandler(b *testing.B) *client.Client {
	b.Helper()
	return serveBareHandler(b, executeCell(startSession(b)))
}

// bareCell runs one cell for a bare handler and returns its reply's cell.
type bareCell func(ctx context.Context, code string) (*api.Cell, error)

// executeCell is s.Execute as a bareCell.
func executeCell(s *controller.Session) bareCell {
	return func(ctx context.Context, code string) (*api.Cell, error) {
		res, err := s.Execute(ctx, code, nil)
		if err != nil {
			return nil, err
		}
		return &api.Cell{ID: res.ID, Status: res.Status, Result: res.Result}, nil
	}
}

// runCell is the daemon's call on s as a bareCell: s.RunCell, the cell tracked as a job
// under the API's default budget (60 s).
func runCell(s *controller.Session) bareCell {
	return func(ctx context.Context, code string) (*api.Cell, error) {
		jw, err := s.RunCell(ctx, code, controller.CellOptions{Budget: 60 * time.Second})
		if err == nil {
			err = jw.Err
		}
		if err == nil && jw.Cell == nil {
			err = fmt.Errorf("cell backgrounded: %+v", jw.Outcome)
		}
		if err != nil {
			return nil, err
		}
		return &api.Cell{ID: jw.Cell.ID, Status: jw.Cell.Status, Result: jw.Cell.Result}, nil
	}
}

// serveBareHandler serves a bare net/http handler on a fresh unix socket (any session
// id), stopped at cleanup, and returns a client of it: it decodes the request, runs the
// cell by run and encodes the reply (no registry, budget, metrics or peer check).
func serveBareHandler(b *testing.B, run bareCell) *client.Client {
	b.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sessions/{id}/cells", func(w http.ResponseWriter, r *http.Request) {
		var req api.RunCell
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c, err := run(r.Context(), req.Code)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(api.CellReply{State: "settled", Job: "j1", Cell: c})
	})
	sock := filepath.Join(b.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	c := client.New(sock)
	b.Cleanup(func() {
		c.Close()
		srv.Close()
	})
	return c
}

// startDetachedSession starts a session in this process on the kind of kernel the
// daemon gives a local session: assembled by a launch Kit with a run directory, so the
// kernel is detached and reached over its link (kernel.sock), not over stdio pipes as
// startSession's. It is closed at cleanup.
func startDetachedSession(b *testing.B) *controller.Session {
	b.Helper()
	bundle, err := images.Stub()
	if err != nil {
		b.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "kb") // short: the run directory holds a socket
	if err != nil {
		b.Fatal(err)
	}
	kit := launch.New(launch.Options{RunDir: daemon.KernelRunDir(dir)})
	parts, err := kit.Assemble(context.Background(), nil, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	s, err := controller.Start(context.Background(), parts.Apply(controller.Options{Bundle: bundle.Hash(), StateDir: filepath.Join(dir, "state")}))
	if err != nil {
		parts.Release()
		b.Fatal(err)
	}
	b.Cleanup(func() {
		s.Close(context.Background())
		parts.Release()
		kit.Close()
		os.RemoveAll(dir)
	})
	return s
}

// BenchmarkCellAPIOverMinimalHandler is issue 20's re-based target for the API's cell
// latency: kennel's API (BenchmarkCellThroughAPI) beside the bare net/http handler over
// Session.Execute (BenchmarkCellThroughMinimalHandler), the same client, interleaved one
// cell each per iteration (their order alternating), so that a change in the machine's
// load hits both. It reports each one's median and p99 and api/handler, the ratio of the
// medians (the target: at most 1.1).
func BenchmarkCellAPIOverMinimalHandler(b *testing.B) {
	r := serve(b, daemon.Options{})
	s := r.newSession(b)
	h := serveMinimalHandler(b)
	ctx := context.Background()
	req := api.RunCell{Code: "x = 1\nx"}
	interleave(b, "api", wallTimed(func() error { return runCellOne(ctx, r.c, s.ID, req) }),
		"handler", wallTimed(func() error { return runCellOne(ctx, h, "s", req) }))
}

// BenchmarkCellAPIOverMinimalHandlerSplit splits BenchmarkCellAPIOverMinimalHandler's
// ratio. The daemon's cell differs from the bare handler's in more than its request
// path, so two more bare handlers, the same client, stand between them: "detached" runs
// Execute on the kind of kernel the daemon runs (a detached local kernel reached over
// its link, where "handler"'s is an attached one over stdio pipes), "runcell" makes the
// daemon's call on such a kernel (Session.RunCell: the cell tracked as a job, under the
// API's budget). So api/runcell is the daemon's request path (and its sessions'
// options), runcell/detached the job tracking, detached/handler the detached kernel; and
// api/handler their product. The four are interleaved, one cell each per iteration, the
// first of them rotating.
func BenchmarkCellAPIOverMinimalHandlerSplit(b *testing.B) {
	r := serve(b, daemon.Options{})
	s := r.newSession(b)
	h := serveMinimalHandler(b)
	det := serveBareHandler(b, executeCell(startDetachedSession(b)))
	rc := serveBareHandler(b, runCell(startDetachedSession(b)))
	ctx := context.Background()
	req := api.RunCell{Code: "x = 1\nx"}
	m := interleaveN(b, []arm{
		{"api", wallTimed(func() error { return runCellOne(ctx, r.c, s.ID, req) })},
		{"handler", wallTimed(func() error { return runCellOne(ctx, h, "s", req) })},
		{"detached", wallTimed(func() error { return runCellOne(ctx, det, "s", req) })},
		{"runcell", wallTimed(func() error { return runCellOne(ctx, rc, "s", req) })},
	})
	for _, q := range [][2]string{{"api", "handler"}, {"api", "runcell"}, {"runcell", "detached"}, {"detached", "handler"}} {
		b.ReportMetric(float64(m[q[0]])/float64(m[q[1]]), q[0]+"/"+q[1])
	}
}

// timedRun runs one cell and returns how long it took.
type timedRun func() (time.Duration, error)

// wallTimed is run timed by the wall clock around its call.
func wallTimed(run func() error) timedRun {
	return func() (time.Duration, error) {
		t0 := time.Now()
		err := run()
		return time.Since(t0), err
	}
}

// interleave runs a and b (named an and bn) 20 times each to warm up, then b.N times
// each, one of each per iteration, alternating which goes first; it reports both one's
// median and p99 and an/bn, the ratio of their medians. An error of any run fails tb.
func interleave(tb *testing.B, an string, a timedRun, bn string, b timedRun) {
	tb.Helper()
	m := interleaveN(tb, []arm{{an, a}, {bn, b}})
	tb.ReportMetric(float64(m[an])/float64(m[bn]), an+"/"+bn)
}

// arm is one of the runs interleaveN compares.
type arm struct {
	name string
	run  timedRun
}

// interleaveN runs each arm 20 times to warm up, then tb.N times each, one of each per
// iteration, the first of them rotating; it reports each one's median and p99 and
// returns the medians by name. An error of any run fails tb.
func interleaveN(tb *testing.B, arms []arm) map[string]time.Duration {
	tb.Helper()
	for range 20 {
		for _, a := range arms {
			if _, err := a.run(); err != nil {
				tb.Fatal(err)
			}
		}
	}
	lat := make([][]time.Duration, len(arms))
	for k := range lat {
		lat[k] = make([]time.Duration, 0, tb.N)
	}
	tb.ResetTimer()
	for i := range tb.N {
		for j := range arms {
			k := (i + j) % len(arms)
			d, err := arms[k].run()
			if err != nil {
				tb.Fatal(err)
			}
			lat[k] = append(lat[k], d)
		}
	}
	tb.StopTimer()
	medians := make(map[string]time.Duration, len(arms))
	for k, a := range arms {
		l := lat[k]
		slices.Sort(l)
		medians[a.name] = l[len(l)/2]
		tb.ReportMetric(float64(l[len(l)/2].Microseconds()), a.name+"-p50-µs")
		tb.ReportMetric(float64(l[len(l)*99/100].Microseconds()), a.name+"-p99-µs")
	}
	return medians
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

// jupyterDriver is a jupyter_client program that starts an ipykernel, runs the cell in
// argv[1] 20 times to warm up, prints "ready", and then runs it once for each line it
// reads on stdin, printing that run's round trip in nanoseconds: from execute to both its
// execute_result on iopub (checked to be "1") and its execute_reply on shell, as the
// client of a Jupyter kernel sees a cell's result. Timed in the driver, so that the
// benchmark's own pipe to it is not Jupyter's cost.
const jupyterDriver = `
import sys, time
from jupyter_client.manager import start_new_kernel

km, kc = start_new_kernel(kernel_name="python3")
code = sys.argv[1]

def run():
    t0 = time.perf_counter_ns()
    mid = kc.execute(code)
    while True:
        m = kc.get_iopub_msg(timeout=30)
        if m["parent_header"].get("msg_id") == mid and m["msg_type"] == "execute_result":
            if m["content"]["data"].get("text/plain") != "1":
                raise SystemExit("result %r" % (m["content"]["data"],))
            break
    while True:
        m = kc.get_shell_msg(timeout=30)
        if m["parent_header"].get("msg_id") == mid:
            if m["content"]["status"] != "ok":
                raise SystemExit("reply %r" % (m["content"],))
            break
    return time.perf_counter_ns() - t0

try:
    for _ in range(20):
        run()
    print("ready", flush=True)
    for _ in sys.stdin:
        print(run(), flush=True)
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
`

// jupyterPython is Debian's interpreter, the one python3-ipykernel and
// python3-jupyter-client install into.
const jupyterPython = "/usr/bin/python3"

// startJupyter starts jupyterDriver on code with Debian's python3, waits for its
// "ready" and returns a timedRun of one warm Jupyter cell; the driver and its kernel end
// at cleanup. Without python3-ipykernel and python3-jupyter-client it skips b (fails it
// under CI=true).
func startJupyter(b *testing.B, code string) timedRun {
	b.Helper()
	return startJupyterDriver(b, jupyterDriver, code)
}

// startJupyterDriver is startJupyter with a driver program of the same protocol (prints
// "ready", then one duration in nanoseconds per line read) and its arguments.
func startJupyterDriver(b *testing.B, driver string, args ...string) timedRun {
	b.Helper()
	if err := exec.Command(jupyterPython, "-c", "import ipykernel, jupyter_client").Run(); err != nil {
		testneed.Missing(b, "Jupyter (Debian's python3-ipykernel and python3-jupyter-client for "+jupyterPython+")", err)
	}
	cmd := exec.Command(jupyterPython, append([]string{"-c", driver}, args...)...)
	cmd.Stderr = os.Stderr
	cmd.Env = append(os.Environ(), "PYDEVD_DISABLE_FILE_VALIDATION=1") // ipykernel's debugger warning, once per kernel
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	out := bufio.NewScanner(stdout)
	if !out.Scan() || out.Text() != "ready" {
		b.Fatalf("jupyter driver: %q %v", out.Text(), out.Err())
	}
	return func() (time.Duration, error) {
		if _, err := io.WriteString(stdin, "\n"); err != nil {
			return 0, fmt.Errorf("jupyter driver: %w", err)
		}
		if !out.Scan() {
			return 0, fmt.Errorf("jupyter driver ended: %v", out.Err())
		}
		ns, err := strconv.ParseInt(out.Text(), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("jupyter driver printed %q", out.Text())
		}
		return time.Duration(ns), nil
	}
}

// BenchmarkCellAPIOverJupyter is issue 20's second re-based target for the API's cell
// latency: a warm cell through kennel's API (client in this process) beside the same
// cell's warm round trip through jupyter_client to an ipykernel (Debian's packages),
// interleaved; api/jupyter is the ratio of the medians (the target: at most 0.1).
func BenchmarkCellAPIOverJupyter(b *testing.B) {
	const code = "x = 1\nx"
	jup := startJupyter(b, code)
	r := serve(b, daemon.Options{})
	s := r.newSession(b)
	ctx := context.Background()
	interleave(b, "api", wallTimed(func() error { return runCellOne(ctx, r.c, s.ID, api.RunCell{Code: code}) }),
		"jupyter", jup)
}

// BenchmarkCellGoAPIWaitOverGoAPI splits BenchmarkCellAPIOverMinimalHandler's ratio: the
// call the API makes (Session.ExecuteWait, the API's 60 s budget) beside the call the bare
// handler makes (Session.Execute), on one session in this process, interleaved;
// wait/execute is the ratio of the medians.
func BenchmarkCellGoAPIWaitOverGoAPI(b *testing.B) {
	s := startSession(b)
	ctx := context.Background()
	interleave(b, "wait", wallTimed(func() error {
		jw, err := s.ExecuteWait(ctx, "x = 1\nx", 60*time.Second, nil)
		if err == nil {
			err = jw.Err
		}
		if err == nil && (jw.Cell == nil || jw.Cell.Result == nil || *jw.Cell.Result != "1") {
			err = fmt.Errorf("%+v", jw.Cell)
		}
		return err
	}), "execute", wallTimed(func() error {
		res, err := s.Execute(ctx, "x = 1\nx", nil)
		if err == nil && (res.Result == nil || *res.Result != "1") {
			err = fmt.Errorf("%+v", res)
		}
		return err
	}))
}
