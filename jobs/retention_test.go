package jobs

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/kennel-dev/kennel/output"
)

// liveHeap is the live heap after a collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// The law: what an ended job keeps in memory is its capture's head and tail (1 MiB +
// 64 KiB), whatever the size of its output and whatever its truncation; the rest of the
// output is on disk (up to the spill limit) or counted.
func TestAnEndedJobKeepsOnlyItsHeadAndTailInMemory(t *testing.T) {
	const (
		jobsPer = 4
		size    = 24 << 20 // past the 16 MiB spill limit
		chunk   = 64 << 10
		// What each ended job may hold: the capture's head and tail, and a quarter more
		// for slice growth and bookkeeping.
		perJob = (output.DefaultPrefixBytes + output.DefaultTailBytes) * 5 / 4
	)
	big := output.On(output.Limits{Bytes: 8 << 20, Lines: 1 << 30, Keep: output.Tail})
	for _, tr := range []output.Truncation{output.Off(), output.Default(), output.On(output.Limits{Keep: output.Tail}), big} {
		t.Run(tr.String(), func(t *testing.T) {
			tb := newTable(t, TableOptions{Truncation: tr, Capture: output.CaptureOptions{SpillDir: spillDir(t)}})
			data := bytes.Repeat([]byte("0123456789abcde\n"), chunk/16)
			before := liveHeap()
			var ended []*Job
			for range jobsPer {
				j := startJob(t, tb, Spec{Command: "big"})
				for n := 0; n < size; n += chunk {
					if err := j.Output(data); err != nil {
						t.Fatal(err)
					}
				}
				if err := j.Finish(Exited(0)); err != nil {
					t.Fatal(err)
				}
				// Reading the report builds it; it is not kept afterwards.
				if s := j.Snapshot(); s.Output.TotalBytes != size || s.Output.KeptBytes+s.Output.DroppedBytes != size {
					t.Fatalf("report of %d bytes: %+v", size, s.Output)
				}
				ended = append(ended, j)
			}
			grown := liveHeap() - before
			t.Logf("%d ended jobs of %d MiB under %v hold %.1f MiB (limit %.1f MiB)", jobsPer, size>>20, tr, float64(grown)/(1<<20), float64(jobsPer*perJob)/(1<<20))
			if grown > jobsPer*perJob {
				t.Fatalf("%d ended jobs of %d bytes under %v hold %d bytes of heap, want at most %d (head + tail each)", jobsPer, size, tr, grown, jobsPer*perJob)
			}
			runtime.KeepAlive(ended)
		})
	}
}

func TestTheNoticeOfAJobPastTheSpillLimitNamesWhatIsRetained(t *testing.T) {
	const size = 20 << 20
	for _, tr := range []output.Truncation{output.Default(), output.Off()} {
		t.Run(tr.String(), func(t *testing.T) {
			tb := newTable(t, TableOptions{Truncation: tr, Capture: output.CaptureOptions{SpillDir: spillDir(t)}})
			j := startJob(t, tb, Spec{Command: "big"})
			data := bytes.Repeat([]byte("0123456789abcdef"), 4096)
			for n := 0; n < size; n += len(data) {
				if err := j.Output(data); err != nil {
					t.Fatal(err)
				}
			}
			if err := j.Finish(Exited(0)); err != nil {
				t.Fatal(err)
			}
			r := j.Snapshot().Output
			const tailFrom = size - output.DefaultTailBytes
			want := fmt.Sprintf("retained: job %s, bytes 0-%d and the last %d bytes (%d-%d) of %d]", j.ID(), output.DefaultSpillLimit-1, output.DefaultTailBytes, tailFrom, size-1, size)
			if n := r.Notice(); !strings.HasSuffix(n, want) || strings.Contains(n, "full output") {
				t.Fatalf("notice %q, want it to end %q", n, want)
			}
			if r.KeptBytes+r.DroppedBytes != size || r.KeptLines+r.DroppedLines != r.TotalLines {
				t.Fatalf("not conserved: %+v", r)
			}
			if tr.IsOff() && (r.KeptBytes != output.DefaultSpillLimit || !bytes.Equal(r.Kept[:16], data[:16])) {
				t.Fatalf("off: kept %d bytes, want the %d retained from the start", r.KeptBytes, output.DefaultSpillLimit)
			}
			c := j.Capture()
			for _, sp := range []output.Span{{Offset: 0, Limit: output.MaxPage}, {Offset: output.DefaultSpillLimit - output.MaxPage, Limit: output.MaxPage}, {Offset: tailFrom, Limit: output.MaxPage}} {
				if p, err := c.ReadPage(sp.Offset, sp.Limit); err != nil || int64(len(p.Data)) != sp.Limit {
					t.Fatalf("read of a named range %+v: %v", sp, err)
				}
			}
			for _, sp := range []output.Span{{Offset: output.DefaultSpillLimit, Limit: 1}, {Offset: tailFrom - 1, Limit: 2}} {
				if _, err := c.ReadPage(sp.Offset, sp.Limit); !errors.Is(err, output.ErrLost) {
					t.Fatalf("read outside the named ranges %+v: %v, want ErrLost", sp, err)
				}
			}
		})
	}
}

func TestTheNoticeOfAJobRetainedWholeSaysSo(t *testing.T) {
	tb := newTable(t, TableOptions{Capture: output.CaptureOptions{SpillDir: spillDir(t)}})
	j := startJob(t, tb, Spec{Command: "x"})
	if err := j.Output(bytes.Repeat([]byte("x\n"), 3000)); err != nil {
		t.Fatal(err)
	}
	if err := j.Finish(Exited(0)); err != nil {
		t.Fatal(err)
	}
	r := j.Snapshot().Output
	if n := r.Notice(); !strings.HasSuffix(n, "; full output: job "+j.ID().String()+"]") {
		t.Fatalf("notice %q", n)
	}
}
