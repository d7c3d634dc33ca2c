package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/client"
	"github.com/kennel-dev/kennel/daemon"
)

// offHeapLimit is the live heap (HeapAlloc after a GC) the daemon may hold once three
// 50 MB cells with truncation off have ended: their captures (1 MiB + 64 KiB each in
// memory, the rest on disk) and the daemon itself, never the outputs whole.
const offHeapLimit = 40 << 20

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func TestOutputWithTruncationOffIsNotKeptWholeInMemory(t *testing.T) {
	r := serve(t, daemon.Options{})
	ctx := context.Background()
	s, err := r.c.CreateSession(ctx, api.CreateSession{Cwd: t.TempDir(), Limits: &api.Limits{Off: true}}, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const size = 50_000_000
	before := heapAlloc()
	for i := range 3 {
		rep, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: fmt.Sprintf("import sys\nsys.stdout.write(%q * %d)", string(rune('a'+i)), size)})
		if err != nil || rep.State != "settled" || rep.Cell == nil || rep.Cell.Status != "ok" {
			t.Fatalf("cell %d: %v %+v", i, err, rep)
		}
		o := rep.Output
		kept := int64(len(o.Text))
		if o.TotalBytes != size || kept+o.DroppedBytes != size {
			t.Fatalf("cell %d: kept %d + dropped %d of %d bytes, want %d in all", i, kept, o.DroppedBytes, o.TotalBytes, size)
		}
		if o.DroppedBytes > 0 && !strings.Contains(o.Notice, "retained:") {
			t.Fatalf("cell %d dropped %d bytes and its notice does not say what is retained: %q", i, o.DroppedBytes, o.Notice)
		}
		t.Logf("cell %d: kept %d, dropped %d; notice %s", i, kept, o.DroppedBytes, o.Notice)
	}
	after := heapAlloc()
	t.Logf("live heap before the cells %.1f MB, after %.1f MB (limit %d MiB); peak RSS of the test process (daemon and client) %s", float64(before)/1e6, float64(after)/1e6, offHeapLimit>>20, peakRSS())
	if after > offHeapLimit {
		t.Fatalf("live heap after three 50 MB cells with truncation off: %.1f MB, want under %d MiB", float64(after)/1e6, offHeapLimit>>20)
	}
}

// peakRSS is the process's peak resident set (VmHWM), or "unknown".
func peakRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// retainedRE reads the ranges a notice names: "bytes 0-16777215 and the last 65536
// bytes (20905984-20971519) of 20971520".
var retainedRE = regexp.MustCompile(`retained: job (j[0-9]+), bytes ([0-9]+)-([0-9]+) and the last ([0-9]+) bytes \(([0-9]+)-([0-9]+)\) of ([0-9]+); read with GET (/sessions/[^/]+/jobs/j[0-9]+/output)\?offset=&limit=`)

func TestTheNoticeNamesTheRetainedRangesAndTheReadsThatWork(t *testing.T) {
	r := serve(t, daemon.Options{})
	ctx := context.Background()
	s := r.newSession(t)
	const size = 20 << 20
	rep, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: fmt.Sprintf("import sys\nsys.stdout.write('0123456789abcdef' * %d)", size/16)})
	if err != nil || rep.State != "settled" {
		t.Fatalf("cell: %v %+v", err, rep)
	}
	m := retainedRE.FindStringSubmatch(rep.Output.Notice)
	if m == nil {
		t.Fatalf("the notice does not name the retained ranges and the call that reads them: %q", rep.Output.Notice)
	}
	n := func(i int) int64 { v, _ := strconv.ParseInt(m[i], 10, 64); return v }
	if m[1] != rep.Job || n(2) != 0 || n(3) != 16<<20-1 || n(4) != 64<<10 || n(5) != size-64<<10 || n(6) != size-1 || n(7) != size {
		t.Fatalf("the notice names the wrong ranges: %q", rep.Output.Notice)
	}
	if want := "/sessions/" + s.ID + "/jobs/" + rep.Job + "/output"; m[8] != want {
		t.Fatalf("the notice names %s, want %s", m[8], want)
	}
	want := func(off int64) byte { return "0123456789abcdef"[off%16] }
	for _, rd := range []struct{ off, limit int64 }{
		{n(2), 64 << 10},              // the start of the first range
		{n(3) + 1 - 64<<10, 64 << 10}, // its end
		{n(5), n(4)},                  // the last bytes
		{n(6), 1},                     // the very last byte
	} {
		p, err := r.c.Output(ctx, s.ID, rep.Job, rd.off, rd.limit)
		if err != nil || int64(len(p.Data)) != rd.limit {
			t.Fatalf("read of a named range offset=%d limit=%d: %v", rd.off, rd.limit, err)
		}
		for i, b := range p.Data {
			if b != want(rd.off+int64(i)) {
				t.Fatalf("read offset=%d: byte %d is %q", rd.off, rd.off+int64(i), b)
			}
		}
	}
	// Outside the ranges: refused, 416, never shortened.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", r.socket)
	}}}
	for _, rd := range []struct{ off, limit int64 }{
		{n(3) + 1, 1},           // the first byte not retained
		{n(3), 2},               // crossing out of the first range
		{n(5) - 1, 2},           // crossing into the last bytes
		{(n(3) + n(5)) / 2, 10}, // between them
	} {
		resp, err := hc.Get(fmt.Sprintf("http://kennel%s?offset=%d&limit=%d", m[8], rd.off, rd.limit))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var eb api.ErrorBody
		if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable || json.Unmarshal(body, &eb) != nil || eb.Error.Code != api.CodeOutputRefused {
			t.Fatalf("read outside the ranges offset=%d limit=%d: status %d %s", rd.off, rd.limit, resp.StatusCode, body)
		}
	}
}

func TestAnInterruptedCellJobReadsInterrupted(t *testing.T) {
	r := serve(t, daemon.Options{})
	ctx := context.Background()
	s := r.newSession(t)
	rep, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "import time\nprint('started', flush=True)\ntime.sleep(60)", BudgetMS: ms(100)})
	if err != nil || rep.State != "backgrounded" {
		t.Fatalf("cell: %v %+v", err, rep)
	}
	// Stop it once it runs: an interrupt before the kernel starts a cell does nothing.
	for deadline := time.Now().Add(10 * time.Second); ; {
		p, err := r.c.Output(ctx, s.ID, rep.Job, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Data) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cell did not start within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopped, err := r.c.StopJob(ctx, s.ID, rep.Job)
	if err != nil || stopped.State != "ended" || stopped.End == nil {
		t.Fatalf("stop: %v %+v", err, stopped)
	}
	if e := stopped.End; !e.Interrupted || e.Killed || e.Signal != nil || e.ExitCode != nil || e.Text != "interrupted" {
		t.Fatalf("the end of an interrupted cell: %+v", e)
	}
	// The wire form: interrupted true, killed false, signal null.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", r.socket)
	}}}
	resp, err := hc.Get("http://kennel/sessions/" + s.ID + "/jobs")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Jobs []struct {
			ID  string                     `json:"id"`
			End map[string]json.RawMessage `json:"end"`
		} `json:"jobs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	for _, j := range list.Jobs {
		if j.ID != rep.Job {
			continue
		}
		if string(j.End["interrupted"]) != "true" || string(j.End["killed"]) != "false" || string(j.End["signal"]) != "null" {
			t.Fatalf("the wire end of an interrupted cell: interrupted %s, killed %s, signal %s", j.End["interrupted"], j.End["killed"], j.End["signal"])
		}
		return
	}
	t.Fatalf("job %s not listed", rep.Job)
}
