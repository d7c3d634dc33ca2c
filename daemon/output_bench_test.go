package daemon_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/client"
	"github.com/kennel-dev/kennel/daemon"
)

// bigOutputCell prints 50,000 lines of 1,000 characters (999 and a newline): 50,000,000 bytes of stdout (issue
// 20, item 1).
const bigOutputCell = "line = 'x' * 999\nfor _ in range(50000):\n    print(line)"

// bigOutputBytes is what bigOutputCell writes.
const bigOutputBytes = 50000 * 1000

// jupyterOutputDriver is a jupyter_client program that starts an ipykernel, runs the cell
// in argv[1] twice to warm up, prints "ready", and then runs it once for each line it
// reads on stdin, printing that run's time in nanoseconds from execute to the last byte
// of its stream output on iopub (the kernel's idle status for it comes after the last
// stream message), having checked that argv[2] characters arrived.
const jupyterOutputDriver = `
import sys, time
from jupyter_client.manager import start_new_kernel

km, kc = start_new_kernel(kernel_name="python3")
code, want = sys.argv[1], int(sys.argv[2])

def run():
    t0 = time.perf_counter_ns()
    mid = kc.execute(code)
    got = 0
    last = t0
    while True:
        m = kc.get_iopub_msg(timeout=120)
        if m["parent_header"].get("msg_id") != mid:
            continue
        if m["msg_type"] == "stream":
            got += len(m["content"]["text"])
            last = time.perf_counter_ns()
        elif m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            break
    if got != want:
        raise SystemExit("got %d characters, want %d" % (got, want))
    kc.get_shell_msg(timeout=30)
    return last - t0

try:
    for _ in range(2):
        run()
    print("ready", flush=True)
    for _ in sys.stdin:
        print(run(), flush=True)
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
`

// BenchmarkCellOutputOverJupyter is issue 20's item 1: a cell printing 50 MB, its output
// streamed through kennel's API with truncation off (every byte delivered), time from the
// request to the last byte of stream output, beside the same cell through jupyter_client
// to an ipykernel (Debian's packages) to the last byte of its stream messages,
// interleaved; api/jupyter is the ratio of the medians (the target: at most 0.5).
func BenchmarkCellOutputOverJupyter(b *testing.B) {
	jup := startJupyterDriver(b, jupyterOutputDriver, bigOutputCell, strconv.Itoa(bigOutputBytes))
	r := serve(b, daemon.Options{})
	ctx := context.Background()
	s, err := r.c.CreateSession(ctx, api.CreateSession{Cwd: b.TempDir(), Limits: &api.Limits{Off: true}}, client.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	kennel := func() (time.Duration, error) {
		start := time.Now()
		var got int
		var last time.Time
		rep, err := r.c.StreamCell(ctx, s.ID, api.RunCell{Code: bigOutputCell}, func(ev api.Event) {
			if ev.Type == "stream" {
				got += len(ev.Text)
				last = time.Now()
			}
		})
		if err != nil {
			return 0, err
		}
		if rep.Cell == nil || rep.Cell.Status != "ok" || got != bigOutputBytes {
			return 0, fmt.Errorf("reply %+v, %d bytes streamed, want %d", rep, got, bigOutputBytes)
		}
		return last.Sub(start), nil
	}
	for range 2 { // warm, as the driver is
		if _, err := kennel(); err != nil {
			b.Fatal(err)
		}
	}
	interleave(b, "api", kennel, "jupyter", jup)
}

// BenchmarkCellOutputRunOverJupyter is the same cell through `kennel run` (a kernel
// started for the command, protocol 1 over stdio, its output to kennel's stdout, read
// here), from the command's start to its last byte of output (its kernel's start
// included, its shutdown not), beside the same
// cell through jupyter_client to an ipykernel, interleaved; run/jupyter is the ratio of
// the medians (the target: at most 0.5). kennel is built from this tree once.
func BenchmarkCellOutputRunOverJupyter(b *testing.B) {
	jup := startJupyterDriver(b, jupyterOutputDriver, bigOutputCell, strconv.Itoa(bigOutputBytes))
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(b.TempDir(), "kennel")
	build := exec.Command("go", "build", "-o", bin, "./cmd/kennel")
	build.Dir = filepath.Dir(strings.TrimSpace(string(root)))
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build kennel: %v\n%s", err, out)
	}
	work := b.TempDir()
	run := func() (time.Duration, error) {
		cmd := exec.Command(bin, "run", "--local", "-c", bigOutputCell)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+filepath.Join(work, "cache"))
		out, err := cmd.StdoutPipe()
		if err != nil {
			return 0, err
		}
		start := time.Now()
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		// The time to the cell's last byte (as Jupyter's side is timed), not to the
		// command's exit: what follows it is the kernel's shutdown.
		var n int64
		var last time.Duration
		buf := make([]byte, 1<<20)
		for {
			m, rerr := out.Read(buf)
			if n += int64(m); n == bigOutputBytes && last == 0 {
				last = time.Since(start)
			}
			if rerr != nil {
				break
			}
		}
		if err := cmd.Wait(); err != nil || n != bigOutputBytes {
			return 0, fmt.Errorf("kennel run: %v, %d bytes, want %d", err, n, bigOutputBytes)
		}
		return last, nil
	}
	for range 2 {
		if _, err := run(); err != nil {
			b.Fatal(err)
		}
	}
	interleave(b, "run", run, "jupyter", jup)
}
