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
// channel: jobFiles, files on this host the controller tails itself, or remoteOutput, the
// files and streams of the kernel's transport (transports.JobOutputs). Life, for both:
// drain at job_end; stop when the job ends without its kernel's word, or its kernel
// detached with the job running (the files stay for the next controller).
type jobStreams interface {
	// stop makes both streams end now; the bytes read before are in the job's output.
	stop()
	// drain reads both streams to what their files hold now, waiting at most grace (for a
	// transport's streams: grace after the last byte arrived), then stops them and waits
	// for them to return; the files are removed, or, where a store records the job's end
	// first, left for remove.
	drain(grace time.Duration)
	// remove removes the files once the job's end is recorded (Session.JobRecorded).
	remove()
}

var (
	_ jobStreams = (*jobFiles)(nil)
	_ jobStreams = (*remoteOutput)(nil)
)

// jobOutputOpenTimeout bounds how long a job's start waits for its transport's output
// files (transports.JobOutputs); past it the job's output goes through frames.
const jobOutputOpenTimeout = 10 * time.Second

// remoteReadSize is the read buffer of each stream of a remoteOutput.
const remoteReadSize = 256 << 10

// jobWay is how a shell job's output reaches the controller (transports.JobOutputs has
// the three ways beside frames); a job's record keeps it, so a later controller reads the
// job's files again the same way.
type jobWay string

const (
	wayFrames    jobWay = ""          // job_output frames
	waySameFS    jobWay = "host"      // files the controller made and tails (a local kernel)
	wayJobOutDir jobWay = "mount"     // the same, the kernel seeing them through a mount
	wayTransport jobWay = "transport" // files and streams of the kernel's transport
)

// openJobStreams gives job a way for its output beside the frame channel when kc's kernel
// has one (see transports.JobOutputs for the three ways, tried in that order), and
// returns it with the paths the kernel is to open and the way; nil when the output goes
// through job_output frames. A way that fails is logged and the next one tried.
func (s *Session) openJobStreams(ctx context.Context, kc *kernelConn, job *jobs.Job) (jobStreams, [2]string, jobWay) {
	info := kc.k.Info()
	keep := s.jobs.keep
	switch {
	case s.opts.Transport.Capabilities().SameFS:
		f, err := newJobFiles(s.jobs.spillDir, "", keep, s.opts.OnJob != nil, job, s.jobs.filePool)
		if err == nil {
			return f, f.named, waySameFS
		}
		s.log.Warn("job output goes through frames", "job", job.ID(), "err", err)
	case info.JobOutDir != "" && s.jobs.jobOutDir != "":
		f, err := newJobFiles(s.jobs.jobOutDir, info.JobOutDir, keep, s.opts.OnJob != nil, job, s.jobs.filePool)
		if err == nil {
			return f, f.named, wayJobOutDir
		}
		s.log.Warn("job output goes through frames", "job", job.ID(), "err", err)
	}
	jo, ok := kc.k.(transports.JobOutputs)
	if !ok {
		return nil, [2]string{}, wayFrames
	}
	octx, cancel := context.WithTimeout(ctx, jobOutputOpenTimeout)
	defer cancel()
	out, err := jo.OpenJobOutput(octx, transports.JobOutputRequest{Keep: keep})
	if err != nil {
		s.log.Warn("job output goes through frames", "job", job.ID(), "err", err)
		return nil, [2]string{}, wayFrames
	}
	stdout, stderr := out.Paths()
	return newRemoteOutput(out, job), [2]string{stdout, stderr}, wayTransport
}

// remoteOutput copies a transports.JobOutput's two streams into a job's output, one
// goroutine per stream, so each stream's bytes keep their order (a stream's Gap counted
// as lost where it falls); done closes once both ended (and the pair was closed).
type remoteOutput struct {
	out  transports.JobOutput
	done chan struct{}
	last atomic.Int64 // when a read last returned bytes (UnixNano)
}

func newRemoteOutput(out transports.JobOutput, job *jobs.Job) *remoteOutput {
	r := &remoteOutput{out: out, done: make(chan struct{})}
	r.last.Store(time.Now().UnixNano())
	gaps := out.Gaps()
	var wg sync.WaitGroup
	for i, stream := range []io.Reader{out.Stdout(), out.Stderr()} {
		wg.Go(func() { r.copy(stream, gaps[i], job) })
	}
	go func() {
		wg.Wait()
		_ = out.Close()
		close(r.done)
	}()
	return r
}

// remove is nothing: the transport removes its files at the end it was told of.
func (r *remoteOutput) remove() {}

func (r *remoteOutput) stop() { _ = r.out.Close() }

// drain is jobFiles.drain with the grace counted from the last byte that arrived (at
// most maxRemoteDrain in all): bytes still on their way over the transport when the
// kernel reported the job's end (up to a channel's window) are not cut off by a slow
// link, while a transport that sends nothing more ends the wait after grace.
func (r *remoteOutput) drain(grace time.Duration) {
	r.out.End()
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

// copy copies stream into job until it ends (any error: the stream's end), counting
// gap's bytes as lost once the stream carried gap.At bytes.
func (r *remoteOutput) copy(stream io.Reader, gap *transports.Gap, job *jobs.Job) {
	buf := make([]byte, remoteReadSize)
	var off int64
	for {
		if gap != nil && off >= gap.At {
			_ = job.Lost(gap.N)
			gap = nil
		}
		p := buf
		if gap != nil && gap.At-off < int64(len(p)) {
			p = p[:gap.At-off]
		}
		n, err := stream.Read(p)
		off += int64(n)
		if n > 0 {
			r.last.Store(time.Now().UnixNano())
			_ = job.Output(p[:n]) // after the end: ignored and counted by the job
		}
		if err != nil {
			return
		}
	}
}
