package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/client"
	"github.com/kennel-dev/kennel/daemon"
	"github.com/kennel-dev/kennel/launch"
	"github.com/kennel-dev/kennel/sessionspec"
	"github.com/kennel-dev/kennel/transports"
)

func ms(n int64) *int64 { return &n }

func apiCode(t testing.TB, err error) api.Code {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) {
		t.Fatalf("not an API error: %v", err)
	}
	return e.Code
}

func TestCreateNeedsAWorkingDirectory(t *testing.T) {
	r := serve(t, daemon.Options{})
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cwd  string
		code api.Code
		text string
	}{
		{"", api.CodeNoWorkingDir, "a session needs a working directory"},
		{filepath.Join(t.TempDir(), "gone"), api.CodeWorkingDirGone, "working directory is gone"},
		{file, api.CodeWorkingDirNotDir, "working directory is not a directory"},
		{"relative/dir", api.CodeInvalid, "absolute"},
	} {
		_, err := r.c.CreateSession(ctx, api.CreateSession{Cwd: tc.cwd}, client.CreateOptions{})
		if err == nil || apiCode(t, err) != tc.code || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("cwd %q: %v, want %s %q", tc.cwd, err, tc.code, tc.text)
		}
	}
	if l, err := r.c.Sessions(ctx); err != nil || len(l) != 0 {
		t.Fatalf("sessions after refused creates: %v %v", l, err)
	}
}

func TestSessionsCRUDAndIdempotentCreate(t *testing.T) {
	r := serve(t, daemon.Options{})
	ctx := context.Background()
	dir := t.TempDir()
	const racers = 6
	ids := make([]string, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := r.c.CreateSession(ctx, api.CreateSession{Cwd: dir}, client.CreateOptions{IdempotencyKey: "k1"})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = s.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("one key made several sessions: %v", ids)
		}
	}
	other := r.newSession(t)
	l, err := r.c.Sessions(ctx)
	if err != nil || len(l) != 2 {
		t.Fatalf("sessions: %v %v", l, err)
	}
	got, err := r.c.Session(ctx, ids[0])
	if err != nil || got.Cwd != dir || *got.Kernel.State != "running" || *got.Kernel.Transport != "local" || got.Kernel.PID == nil {
		t.Fatalf("get: %+v %v", got, err)
	}
	if err := r.c.DeleteSession(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := r.c.DeleteSession(ctx, ids[0]); apiCode(t, err) != api.CodeNotFound {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := r.c.Session(ctx, ids[0]); apiCode(t, err) != api.CodeNotFound {
		t.Fatalf("get after delete: %v", err)
	}
	if _, err := r.c.CreateSession(ctx, api.CreateSession{Cwd: dir}, client.CreateOptions{IdempotencyKey: "k1"}); apiCode(t, err) != api.CodeNotFound {
		t.Fatalf("a key whose session was deleted: %v", err)
	}
	if l, _ := r.c.Sessions(ctx); len(l) != 1 || l[0].ID != other.ID {
		t.Fatalf("sessions after delete: %v", l)
	}
}

// countingTransport counts kernel starts.
type countingTransport struct {
	transports.Transport
	starts atomic.Int64
}

func (c *countingTransport) Start(ctx context.Context, spec transports.Spec) (transports.Kernel, error) {
	c.starts.Add(1)
	return c.Transport.Start(ctx, spec)
}

func TestObservationStartsNoKernelAndListsRunningJobs(t *testing.T) {
	var ct *countingTransport
	kit := launch.New(launch.Options{})
	t.Cleanup(func() { _ = kit.Close() })
	r := serve(t, daemon.Options{Kit: kit, Assemble: func(ctx context.Context, spec *sessionspec.Transport, cwd string) (*launch.Parts, error) {
		p, err := kit.Assemble(ctx, spec, cwd)
		if err == nil {
			ct = &countingTransport{Transport: p.Transport}
			p.Transport = ct
		}
		return p, err
	}})
	ctx := context.Background()
	s := r.newSession(t)
	long := "sleep 30 #" + strings.Repeat("é", 5000)
	j, err := r.c.RunJob(ctx, s.ID, long)
	if err != nil {
		t.Fatal(err)
	}
	var got *api.Session
	for range 200 {
		if got, err = r.c.Session(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
		if len(got.Kernel.RunningJobs) == 1 && got.Kernel.RunningJobs[0].PID != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if *got.Kernel.LiveJobCount != 1 || len(got.Kernel.RunningJobs) != 1 {
		t.Fatalf("observation: %+v", got.Kernel)
	}
	rj := got.Kernel.RunningJobs[0]
	if rj.ID != j.ID || rj.PID == nil || *rj.PID <= 0 || rj.StartedAt <= 0 || len([]rune(rj.Command)) != 4096 {
		t.Fatalf("running job: id %s pid %v started %d command of %d scalars", rj.ID, rj.PID, rj.StartedAt, len([]rune(rj.Command)))
	}
	if n := ct.starts.Load(); n != 1 {
		t.Fatalf("%d kernel starts after observations, want 1", n)
	}
	// The stop: 404 for a missing job, then the job ended, confirmed.
	if _, err := r.c.StopJob(ctx, s.ID, "j99"); apiCode(t, err) != api.CodeNotFound {
		t.Fatalf("stop of a missing job: %v", err)
	}
	if _, err := r.c.StopJob(ctx, s.ID, "nonsense"); apiCode(t, err) != api.CodeNotFound {
		t.Fatalf("stop of a bad id: %v", err)
	}
	stopped, err := r.c.StopJob(ctx, s.ID, j.ID)
	if err != nil || stopped.State != "ended" || stopped.End == nil || !stopped.End.Killed {
		t.Fatalf("stop: %+v %v", stopped, err)
	}
	if got, _ = r.c.Session(ctx, s.ID); *got.Kernel.LiveJobCount != 0 || len(got.Kernel.RunningJobs) != 0 {
		t.Fatalf("observation after stop: %+v", got.Kernel)
	}
}

func TestCellsSettleDetachAndPageTheirOutput(t *testing.T) {
	r := serve(t, daemon.Options{})
	ctx := context.Background()
	s := r.newSession(t)
	rep, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "x = 6*7\nprint('hi')\nx"})
	if err != nil || rep.State != "settled" || rep.Cell == nil || rep.Cell.Status != "ok" || *rep.Cell.Result != "42" || rep.Output.Text != "hi\n" {
		t.Fatalf("cell: %+v %v", rep, err)
	}
	rep, err = r.c.RunCell(ctx, s.ID, api.RunCell{Code: "1/0"})
	if err != nil || rep.Cell.Status != "error" || rep.Cell.Exception.Name != "ZeroDivisionError" {
		t.Fatalf("failing cell: %+v %v", rep, err)
	}
	// Detached: the cell goes on as a job; its output is paged; a stop ends it.
	rep, err = r.c.RunCell(ctx, s.ID, api.RunCell{Code: "import time\nprint('a'*100000, flush=True)\ntime.sleep(60)", BudgetMS: ms(300)})
	if err != nil || rep.State != "backgrounded" || rep.Job == "" {
		t.Fatalf("detached cell: %+v %v", rep, err)
	}
	jl, err := r.c.Jobs(ctx, s.ID)
	if err != nil || len(jl) != 3 || jl[2].ID != rep.Job || jl[2].State != "running" || jl[0].State != "ended" {
		t.Fatalf("jobs: %+v %v", jl, err)
	}
	var got []byte
	for off := int64(0); len(got) < 100001; {
		p, err := r.c.Output(ctx, s.ID, rep.Job, off, 40000)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.Data...)
		off += int64(len(p.Data))
		if len(p.Data) == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if string(got) != strings.Repeat("a", 100000)+"\n" {
		t.Fatalf("paged output: %d bytes", len(got))
	}
	_, err = r.c.Output(ctx, s.ID, rep.Job, 0, 1<<20)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeOutputRefused || ae.Use == nil || ae.Use.Limit != 65536 {
		t.Fatalf("an oversized page: %v", err)
	}
	stopped, err := r.c.StopJob(ctx, s.ID, rep.Job)
	if err != nil || stopped.State != "ended" {
		t.Fatalf("stop of a detached cell: %+v %v", stopped, err)
	}
	// The session still runs cells.
	rep, err = r.c.RunCell(ctx, s.ID, api.RunCell{Code: "2+2"})
	if err != nil || rep.Cell == nil || *rep.Cell.Result != "4" {
		t.Fatalf("after the stop: %+v %v", rep, err)
	}
}

func TestCellOutputStreamsAsNDJSON(t *testing.T) {
	r := serve(t, daemon.Options{})
	ctx := context.Background()
	s := r.newSession(t)
	var events []api.Event
	rep, err := r.c.StreamCell(ctx, s.ID, api.RunCell{Code: "import sys, time\nfor i in range(3):\n    print(i, flush=True); time.sleep(0.05)\nprint('e', file=sys.stderr)\n'done'"},
		func(ev api.Event) { events = append(events, ev) })
	if err != nil || rep.State != "settled" || *rep.Cell.Result != "'done'" {
		t.Fatalf("stream: %+v %v", rep, err)
	}
	var out, errOut string
	for _, ev := range events {
		switch {
		case ev.Type == "stream" && ev.Name == "stdout":
			out += ev.Text
		case ev.Type == "stream" && ev.Name == "stderr":
			errOut += ev.Text
		default:
			t.Errorf("unexpected event %+v", ev)
		}
	}
	if out != "0\n1\n2\n" || errOut != "e\n" {
		t.Fatalf("streamed %q / %q", out, errOut)
	}
	if len(events) < 3 {
		t.Fatalf("output did not arrive as it ran: %d events", len(events))
	}
}

func TestChildWorkspaceAndHandBack(t *testing.T) {
	r := serve(t, daemon.Options{})
	ctx := context.Background()
	parentDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(parentDir, "a.txt"), []byte("base\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(parentDir, "b.txt"), []byte("base\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := r.c.CreateSession(ctx, api.CreateSession{Cwd: parentDir}, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := r.c.CreateChild(ctx, p.ID, api.CreateChild{ID: "kid"})
	if err != nil || ch.Session.Parent != p.ID || ch.Files != 2 {
		t.Fatalf("child: %+v %v", ch, err)
	}
	if _, err := r.c.CreateChild(ctx, p.ID, api.CreateChild{ID: "kid"}); apiCode(t, err) != api.CodeConflict {
		t.Fatalf("a second child with the same id: %v", err)
	}
	if _, err := r.c.CreateChild(ctx, p.ID, api.CreateChild{ID: "../x"}); apiCode(t, err) != api.CodeInvalid {
		t.Fatalf("a bad child id: %v", err)
	}
	rep, err := r.c.RunCell(ctx, ch.Session.ID, api.RunCell{Code: "open('a.txt','w').write('child\\n'); open('b.txt','w').write('child\\n')"})
	if err != nil || rep.Cell == nil || rep.Cell.Status != "ok" {
		t.Fatalf("child cell: %+v %v", rep, err)
	}
	if err := os.WriteFile(filepath.Join(parentDir, "b.txt"), []byte("parent\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hb, err := r.c.HandBack(ctx, p.ID, ch.Session.ID)
	if err != nil || len(hb.Taken) != 1 || hb.Taken[0] != "a.txt" || len(hb.Conflicts) != 1 || hb.Conflicts[0].Path != "b.txt" {
		t.Fatalf("hand-back: %+v %v", hb, err)
	}
	if b, _ := os.ReadFile(filepath.Join(parentDir, "a.txt")); string(b) != "child\n" {
		t.Fatalf("a.txt = %q", b)
	}
	if _, err := r.c.Session(ctx, ch.Session.ID); apiCode(t, err) != api.CodeNotFound {
		t.Fatalf("the child session after its hand-back: %v", err)
	}
	m, err := r.c.Metrics(ctx)
	if err != nil || !strings.Contains(m, "kennel_handback_conflicts_total 1") {
		t.Fatalf("metrics: %v\n%s", err, m)
	}
}

func TestMetricsCountSessionsKernelsAndRefusals(t *testing.T) {
	r := serve(t, daemon.Options{})
	ctx := context.Background()
	dir := t.TempDir()
	s, err := r.c.CreateSession(ctx, api.CreateSession{Cwd: dir}, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "import kennel\ntry:\n    kennel.fs.read('/etc/passwd')\nexcept kennel.HostError as e:\n    print(e.code)\ntry:\n    kennel.host_request('no.such')\nexcept kennel.HostError:\n    pass\nprint('x'*60000)"})
	if err != nil || !strings.HasPrefix(rep.Output.Text, "outside\n") || rep.Output.DroppedBytes == 0 {
		t.Fatalf("cell: %+v %v", rep.Output.Notice, err)
	}
	m, err := r.c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`kennel_sessions{transport="local"} 1`,
		`kennel_kernels{transport="local"} 1`,
		`kennel_fs_requests_refused_total{code="outside"} 1`,
		`kennel_host_requests_total{result="outside",type="fs.read"} 1`,
		`kennel_job_output_bytes_total{kind="dropped"}`,
		`kennel_job_output_bytes_total{kind="kept"}`,
		`kennel_cells_total{state="settled"} 1`,
		`kennel_frames_total{decision="accepted"} 1`,
		`kennel_frames_total{decision="unserved"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q:\n%s", want, m)
		}
	}
}

// TestOpenAPIMatchesTheRoutes checks that every route the document names is served and
// that every served route is in the document: each documented operation is requested
// and must not meet the router's 404/405, and a route missing from the document is found
// by probing the document's complement.
func TestOpenAPIMatchesTheRoutes(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for m := range ops {
			if m == "parameters" {
				continue
			}
			documented[strings.ToUpper(m)+" "+path] = true
		}
	}
	served := map[string]bool{}
	for _, rt := range daemon.Routes() {
		served[rt] = true
	}
	var missing, extra []string
	for k := range served {
		if !documented[k] {
			missing = append(missing, k)
		}
	}
	for k := range documented {
		if !served[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing)+len(extra) > 0 {
		t.Fatalf("served but not documented: %v; documented but not served: %v", missing, extra)
	}
	// Every documented operation reaches a handler on the live daemon: the router's own
	// replies are 405 method_not_allowed and 404 no_route.
	r := serve(t, daemon.Options{})
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", r.socket)
	}}}
	for k := range documented {
		method, path, _ := strings.Cut(k, " ")
		path = strings.NewReplacer("{id}", "nosuch", "{job}", "j1", "{child}", "nochild").Replace(path)
		req, _ := http.NewRequest(method, "http://kennel"+path, strings.NewReader("{}"))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body api.ErrorBody
		decErr := json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if decErr == nil && (body.Error.Code == api.CodeMethodNotAllowed || body.Error.Code == api.CodeNoRoute) {
			t.Errorf("%s: status %d: not served", k, resp.StatusCode)
		}
	}
	got, err := hc.Get("http://kennel/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer got.Body.Close()
	var served2 map[string]any
	if err := json.NewDecoder(got.Body).Decode(&served2); err != nil || served2["openapi"] != "3.1.0" {
		t.Fatalf("/openapi.json: %v", err)
	}
}
