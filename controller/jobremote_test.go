package controller

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/output"
	"github.com/kennel-dev/kennel/transports"
)

// pipeOutput is a transports.JobOutput over two in-memory pipes: the test writes what
// "the job" wrote; Close ends both streams at once, as a transport's does.
type pipeOutput struct {
	outR, errR *io.PipeReader
	outW, errW *io.PipeWriter

	gaps [2]*transports.Gap

	mu     sync.Mutex
	ended  bool
	closed bool
}

func newPipeOutput() *pipeOutput {
	p := &pipeOutput{}
	p.outR, p.outW = io.Pipe()
	p.errR, p.errW = io.Pipe()
	return p
}

func (p *pipeOutput) Paths() (string, string) { return "/run/out", "/run/err" }
func (p *pipeOutput) Stdout() io.Reader       { return p.outR }
func (p *pipeOutput) Stderr() io.Reader       { return p.errR }

func (p *pipeOutput) Gaps() [2]*transports.Gap { return p.gaps }

func (p *pipeOutput) End() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
}

func (p *pipeOutput) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.outR.CloseWithError(io.ErrClosedPipe)
	p.errR.CloseWithError(io.ErrClosedPipe)
	return nil
}

func (p *pipeOutput) state() (ended, closed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ended, p.closed
}

// testJob starts a job of a fresh table.
func testJob(t *testing.T) *jobs.Job {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	table, err := jobs.NewTable(jobs.TableOptions{Capture: output.CaptureOptions{SpillDir: dir}})
	if err != nil {
		t.Fatal(err)
	}
	j, err := table.Start(jobs.Spec{Command: "test", Owner: jobs.OwnerFunc(func(context.Context) error { return nil })})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestARemoteOutputDrainsBytesStillArriving: bytes that keep arriving after the job's
// end (a transport's in flight) are all taken, though they take longer than the grace
// in all; the drain ends with the streams' end.
func TestARemoteOutputDrainsBytesStillArriving(t *testing.T) {
	p := newPipeOutput()
	j := testJob(t)
	r := newRemoteOutput(p, j)
	const grace = 2 * time.Second
	drained := make(chan struct{})
	go func() {
		r.drain(grace)
		close(drained)
	}()
	for range 8 { // 8 × 300 ms: more than the grace in all, never near a grace of silence
		if _, err := p.outW.Write([]byte("0123456789")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	_, _ = p.errW.Write([]byte("e"))
	p.outW.Close()
	p.errW.Close()
	<-drained
	if ended, _ := p.state(); !ended {
		t.Error("drain did not say the job ended")
	}
	if st := j.Capture().Stat(); st.Seen != 81 {
		t.Fatalf("%d bytes seen, want 81", st.Seen)
	}
}

// TestARemoteOutputHeldSilentIsStopped: a stream that stays open and silent (a stray
// writer holds its FIFO) is stopped a grace after the drain began; what came before is
// kept.
func TestARemoteOutputHeldSilentIsStopped(t *testing.T) {
	p := newPipeOutput()
	j := testJob(t)
	r := newRemoteOutput(p, j)
	if _, err := p.outW.Write([]byte("before")); err != nil {
		t.Fatal(err)
	}
	p.errW.Close()
	r.drain(50 * time.Millisecond) // returns only once both copies returned
	if _, closed := p.state(); !closed {
		t.Error("the held stream was not closed")
	}
	if st := j.Capture().Stat(); st.Seen != 6 {
		t.Fatalf("%d bytes seen, want 6", st.Seen)
	}
}

// TestARemoteOutputCountsAStreamsGapWhereItFalls: a resumed transport stream with a gap
// (bytes an earlier reader consumed and punched) counts the gap as lost after exactly
// At bytes of the stream, whatever the reads' sizes: seen is read plus lost, and the bytes
// before the gap are kept as read.
func TestARemoteOutputCountsAStreamsGapWhereItFalls(t *testing.T) {
	p := newPipeOutput()
	p.gaps[0] = &transports.Gap{At: 10, N: 1000}
	j := testJob(t)
	r := newRemoteOutput(p, j)
	go func() {
		_, _ = p.outW.Write([]byte("0123456789abcdef")) // 10 before the gap, 6 after
		p.outW.Close()
		p.errW.Close()
	}()
	r.drain(time.Second)
	st := j.Capture().Stat()
	if st.Seen != 1016 {
		t.Fatalf("%d bytes seen, want 16 read and 1000 lost", st.Seen)
	}
	pg, err := j.Capture().ReadPage(0, 10)
	if err != nil || string(pg.Data) != "0123456789" {
		t.Fatalf("before the gap: %q, %v", pg.Data, err)
	}
	if _, err := j.Capture().ReadPage(10, 1); !errors.Is(err, output.ErrLost) {
		t.Fatalf("a byte of the gap read: %v", err)
	}
}
