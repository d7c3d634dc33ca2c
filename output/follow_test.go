package output_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/output"
	"pgregory.net/rapid"
)

// TestPropFollowerWritesExactlyTheReportedWindow feeds a job generated output in random
// chunks, polls a follower at random points and finishes it with the settled report: the
// writer holds a prefix of the report's window at every point, and exactly the window at
// the end, under any truncation.
func TestPropFollowerWritesExactlyTheReportedWindow(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spill")
	if err := output.PrepareDir(dir); err != nil {
		t.Fatal(err)
	}
	rapid.Check(t, func(rt *rapid.T) {
		var tr output.Truncation
		switch rapid.IntRange(0, 3).Draw(rt, "mode") {
		case 0:
			tr = output.Off()
		case 1:
			tr = output.On(output.Limits{Bytes: rapid.Int64Range(1, 64).Draw(rt, "bytes"), Lines: rapid.Int64Range(1, 8).Draw(rt, "lines"), Keep: output.Tail})
		default:
			tr = output.On(output.Limits{Bytes: rapid.Int64Range(1, 64).Draw(rt, "bytes"), Lines: rapid.Int64Range(1, 8).Draw(rt, "lines")})
		}
		// Small pages of capture: a 16-byte prefix and tail and a 48-byte spill, so the
		// follower also meets lost output.
		table, err := jobs.NewTable(jobs.TableOptions{Truncation: tr, Capture: output.CaptureOptions{SpillDir: dir, PrefixBytes: 16, TailBytes: 16, SpillLimit: 48}})
		if err != nil {
			rt.Fatal(err)
		}
		job, err := table.Start(jobs.Spec{Command: "gen", Owner: jobs.OwnerFunc(func(context.Context) error { return nil })})
		if err != nil {
			rt.Fatal(err)
		}
		var out bytes.Buffer
		f := output.NewFollower(job.Capture(), tr, &out)
		chunks := rapid.SliceOfN(rapid.SampledFrom([]string{"a", "bc\n", "\n", "é", "€\n", "long line of text\n", "\xff"}), 0, 40).Draw(rt, "chunks")
		for i, c := range chunks {
			if err := job.Output([]byte(c)); err != nil {
				rt.Fatal(err)
			}
			if rapid.Bool().Draw(rt, fmt.Sprintf("poll%d", i)) {
				if err := f.Poll(); err != nil {
					rt.Fatal(err)
				}
			}
		}
		if err := job.Finish(jobs.Exited(0)); err != nil {
			rt.Fatal(err)
		}
		_ = f.Poll()
		report := job.Snapshot().Output
		all := strings.Join(chunks, "")
		if tr.IsOff() {
			// Under Off the follower streams what it saw while it was retained, which may
			// be more than the report keeps past the retention cap: every byte is the
			// job's, in order, and the report's bytes are its start.
			if !strings.HasPrefix(all, out.String()) {
				rt.Fatalf("follower wrote %q, not a prefix of the output %q", out.Bytes(), all)
			}
			if err := f.Finish(report); err != nil {
				rt.Fatal(err)
			}
			if !bytes.HasPrefix(out.Bytes(), report.Kept) || !strings.HasPrefix(all, out.String()) {
				rt.Fatalf("follower wrote %q; the report keeps %q of %q", out.Bytes(), report.Kept, all)
			}
			return
		}
		if !bytes.HasPrefix(report.Kept, out.Bytes()) {
			rt.Fatalf("follower wrote %q, not a prefix of the window %q", out.Bytes(), report.Kept)
		}
		if err := f.Finish(report); err != nil {
			rt.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), report.Kept) {
			rt.Fatalf("follower wrote %q, the window is %q", out.Bytes(), report.Kept)
		}
	})
}

// TestAFollowerWritesNoHeadLineAReportPastTheSpillCannotKeep: a head window as large as
// the spill limit, output that outgrows the spill after the follower read its whole
// retained start. The report, made from the retained bytes only, keeps one byte less than
// they hold (the window rule needs Bytes+1 bytes), so the line that ends at the spill
// limit is not in it: the follower must not have written it, and ends with exactly the
// report's bytes. (Found by TestPropFollowerWritesExactlyTheReportedWindow; before the
// fix the follower wrote the line and Finish refused the report.)
func TestAFollowerWritesNoHeadLineAReportPastTheSpillCannotKeep(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spill")
	if err := output.PrepareDir(dir); err != nil {
		t.Fatal(err)
	}
	c, err := output.NewCapture(output.CaptureOptions{SpillDir: dir, PrefixBytes: 16, TailBytes: 16, SpillLimit: 48})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tr := output.On(output.Limits{Bytes: 48, Lines: 3})
	var out bytes.Buffer
	f := output.NewFollower(c, tr, &out)
	line := "long line of text\n"
	for _, chunk := range []string{"éééé€\n", line, line} { // 48 bytes: the spill limit
		_, _ = c.Write([]byte(chunk))
	}
	if err := f.Poll(); err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte(line)) // past the spill: not retained
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Poll(); err != nil {
		t.Fatal(err)
	}
	report, err := c.Bound(tr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(report.Kept, out.Bytes()) {
		t.Fatalf("follower wrote %q before the end, not a prefix of the window %q", out.Bytes(), report.Kept)
	}
	if err := f.Finish(report); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), report.Kept) {
		t.Fatalf("follower wrote %q, the window is %q", out.Bytes(), report.Kept)
	}
}
