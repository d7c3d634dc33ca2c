package controller

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kennel-dev/kennel/jobs"
	"github.com/kennel-dev/kennel/transports"
)

// jobStreams carry one shell job's stdout and stderr into its output beside the frame
// channel: jobFIFOs, FIFOs on this host the controller reads itself, or remoteOutput, the
// FIFOs and streams of the kernel's transport (transports.JobOutputs). Life, for both:
// release when the kernel has opened its ends or will not (job_start, job_end); drain at
// job_end; stop when the job ends without its kernel's word.
type jobStreams interface {
	// release drops the controller's (or transport's) own hold on the write ends: each
	// stream ends once the last writer the kernel opened closes. Idempotent.
	release()
	// stop makes both streams end now; the bytes read before are in the job's output.
	stop()
	// drain releases, waits for both streams' end at most grace, then stops them and
	// waits for them to return.
	drain(grace time.Duration)
}

var (
	_ jobStreams = (*jobFIFOs)(nil)
	_ jobStreams = (*remoteOutput)(nil)
)

// jobOutputOpenTimeout bounds how long a job's start waits for its transport's FIFOs
// (transports.JobOutputs); past it the job's output goes through frames.
const jobOutputOpenTimeout = 10 * time.Second

// remoteReadSize is the read buffer of each stream of a remoteOutput.
const remoteReadSize = 256 << 10

// openJobStreams gives job a way for its output beside the frame channel when kc's kernel
// has one (see transports.JobOutputs for the three ways, tried in that order), and
// returns it with the paths the kernel is to open; nil when the output goes through
// job_output frames. A way that fails is logged and the next one tried.
func (s *Session) openJobStreams(ctx context.Context, kc *kernelConn, job *jobs.Job) (jobStreams, [2]string) {
	info := kc.k.Info()
	switch {
	case s.opts.Transport.Capabilities().SameFS:
		f, err := newJobFIFOs(s.jobs.spillDir, "", job, s.jobs.fifoPool)
		if err == nil {
			return f, f.named
		}
		s.log.Warn("job output goes through frames", "job", job.ID(), "err", err)
	case info.FIFODir != "" && s.jobs.fifoDir != "":
		f, err := newJobFIFOs(s.jobs.fifoDir, info.FIFODir, job, s.jobs.fifoPool)
		if err == nil {
			return f, f.named
		}
		s.log.Warn("job output goes through frames", "job", job.ID(), "err", err)
	}
	jo, ok := kc.k.(transports.JobOutputs)
	if !ok {
		return nil, [2]string{}
	}
	octx, cancel := context.WithTimeout(ctx, jobOutputOpenTimeout)
	defer cancel()
	out, err := jo.OpenJobOutput(octx)
	if err != nil {
		s.log.Warn("job output goes through frames", "job", job.ID(), "err", err)
		return nil, [2]string{}
	}
	stdout, stderr := out.Paths()
	return newRemoteOutput(out, job), [2]string{stdout, stderr}
}

// remoteOutput copies a transports.JobOutput's two streams into a job's output, one
// goroutine per stream, so each stream's bytes keep their order; done closes once both
// ended (and the pair was closed).
type remoteOutput struct {
	out  transports.JobOutput
	done chan struct{}
	last atomic.Int64 // when a read last returned bytes (UnixNano)
}

func newRemoteOutput(out transports.JobOutput, job *jobs.Job) *remoteOutput {
	r := &remoteOutput{out: out, done: make(chan struct{})}
	r.last.Store(time.Now().UnixNano())
	var wg sync.WaitGroup
	for _, stream := range []io.Reader{out.Stdout(), out.Stderr()} {
		wg.Go(func() { r.copy(stream, job) })
	}
	go func() {
		wg.Wait()
		_ = out.Close()
		close(r.done)
	}()
	return r
}

func (r *remoteOutput) release() { r.out.Release() }

func (r *remoteOutput) stop() { _ = r.out.Close() }

// drain is jobFIFOs.drain with the grace counted from the last byte that arrived (at
// most maxRemoteDrain in all): bytes still on their way over the transport when the
// kernel reported the job's end (up to a channel's window) are not cut off by a slow
// link, while a stray process that holds a FIFO and writes nothing ends the wait after
// grace, as on the host.
func (r *remoteOutput) drain(grace time.Duration) {
	r.release()
	start := time.Now()
	t := time.NewTimer(grace)
	defer t.Stop()
	for {
		select {
		case <-r.done:
			return
		case <-t.C:
		}
		quiet := time.Since(time.Unix(0, r.last.Load()))
		if quiet >= grace || time.Since(start) >= maxRemoteDrain {
			break
		}
		t.Reset(grace - quiet)
	}
	r.stop()
	<-r.done
}

// maxRemoteDrain bounds remoteOutput.drain whatever keeps arriving.
const maxRemoteDrain = time.Minute

// copy copies stream into job until it ends (any error: the stream's end).
func (r *remoteOutput) copy(stream io.Reader, job *jobs.Job) {
	buf := make([]byte, remoteReadSize)
	for {
		n, err := stream.Read(buf)
		if n > 0 {
			r.last.Store(time.Now().UnixNano())
			_ = job.Output(buf[:n]) // after the end: ignored and counted by the job
		}
		if err != nil {
			return
		}
	}
}
