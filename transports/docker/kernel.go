package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/transports"
)

// Kernel is a kernel running in a container (run mode) or as an exec (exec mode). It is
// single use and safe for concurrent use; see transports.Kernel.
type Kernel struct {
	info   transports.Info
	conn   client.HijackedResponse
	stdin  *stdinConn
	stdout *io.PipeReader

	demuxDone chan struct{} // closed when the attached stream has been read to its end
	done      chan struct{} // closed when exit and err are set
	exit      transports.Exit
	err       error

	killed atomic.Bool
	ladder *transports.Ladder
	// escalate is the mode's stage after the stdin grace: stop the container, or signal
	// the exec's process. It returns when that stage has run (not when the end is seen).
	escalate func(ctx context.Context)

	// endMu orders the container's end as reap sees it against the stop stage: ended is
	// set when the engine reported the container stopped, stopped when the stop stage
	// was issued while it still ran (run mode; its SIGKILL then looks like an OOM kill).
	endMu          sync.Mutex
	ended, stopped bool
}

var _ transports.Kernel = (*Kernel)(nil)

// newKernel wires the attached stream: stdin writes go to conn, the multiplexed output is
// split into the stdout pipe and stderr (nil: discarded).
func newKernel(info transports.Info, conn client.HijackedResponse, stderr io.Writer, stdinGrace time.Duration) *Kernel {
	if stderr == nil {
		stderr = io.Discard
	}
	pr, pw := io.Pipe()
	k := &Kernel{
		info:      info,
		conn:      conn,
		stdin:     &stdinConn{conn: conn},
		stdout:    pr,
		demuxDone: make(chan struct{}),
		done:      make(chan struct{}),
	}
	k.ladder = &transports.Ladder{Ended: k.done, Steps: []transports.Step{
		{Act: func() { _ = k.stdin.Close() }, Grace: stdinGrace},
		{Act: func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			k.escalate(ctx)
		}},
	}}
	go func() {
		defer close(k.demuxDone)
		_, err := stdcopy.StdCopy(pw, stderr, conn.Reader)
		if errors.Is(err, net.ErrClosed) {
			err = nil
		}
		pw.CloseWithError(err) // nil: EOF
	}()
	return k
}

// Stdin is the kernel's standard input (the attached stream). Close ends it (the stub
// then shuts down); the container's stdin closes with it.
func (k *Kernel) Stdin() io.WriteCloser { return k.stdin }

// Stdout is the kernel's standard output, demultiplexed from the attached stream.
func (k *Kernel) Stdout() io.Reader { return k.stdout }

// Info says Transport "docker", no host pids, and ID the container id (run mode) or the
// exec id (exec mode).
func (k *Kernel) Info() transports.Info { return k.info }

// Wait blocks until the kernel has exited and, in run mode, its container is removed.
// Code is the container's (or exec's) exit code as the engine reports it (128+N after
// signal N in a container, whose init reports it so). Exit.OOM (run mode) reports that
// the memory limit ended the kernel itself: the engine saw an OOM kill in the container
// (State.OOMKilled) and the container ended by SIGKILL (137) before Kill's stop stage
// began. A cell's child or job killed by the limit while the kernel lives on does not
// make its later end an OOM, nor does the stop stage's SIGKILL. Exit.Killed reports
// that Kill ran before the end. Later calls return the same.
func (k *Kernel) Wait() (transports.Exit, error) {
	<-k.done
	return k.exit, k.err
}

// Kill ends the kernel in stages: close stdin and wait Options.StdinGrace for the stub to
// exit; then stop the container (SIGTERM, and SIGKILL after Options.StopGrace) or, in
// exec mode, signal the exec's process TERM then KILL; then the container is removed.
// It returns once the end is confirmed (Wait's result is set). The stages run once,
// whoever calls Kill and however often; if ctx ends first, Kill returns ctx's cause and
// the stages go on.
func (k *Kernel) Kill(ctx context.Context) error {
	select {
	case <-k.done:
		return nil
	default:
	}
	k.killed.Store(true)
	return k.ladder.Kill(ctx, fmt.Sprintf("docker kernel %.12s", k.info.ID))
}

// stopping reports whether the stop stage may go on: false once the container's end was
// seen (nothing to stop). Otherwise it records that the stop was issued.
func (k *Kernel) stopping() bool {
	k.endMu.Lock()
	defer k.endMu.Unlock()
	if k.ended {
		return false
	}
	k.stopped = true
	return true
}

// exited records that the container's end was seen and reports whether the stop stage
// had been issued before it.
func (k *Kernel) exited() (stopped bool) {
	k.endMu.Lock()
	defer k.endMu.Unlock()
	k.ended = true
	return k.stopped
}

// finish records the end; exit.Killed is set when Kill ran before it.
func (k *Kernel) finish(exit transports.Exit, err error) {
	exit.Killed = k.killed.Load()
	k.exit, k.err = exit, err
	close(k.done)
}

// drain waits up to d for the attached stream to be read to its end, then closes the
// connection (which ends it) and waits for the reader.
func (k *Kernel) drain(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-k.demuxDone:
	case <-t.C:
	}
	k.conn.Close()
	<-k.demuxDone
}

// stdinConn is the write side of the attached stream; Close half-closes it.
type stdinConn struct {
	mu     sync.Mutex
	conn   client.HijackedResponse
	closed bool
}

var errStdinClosed = errors.New("kernel stdin closed")

func (s *stdinConn) Write(p []byte) (int, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return 0, errStdinClosed
	}
	return s.conn.Conn.Write(p)
}

func (s *stdinConn) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.conn.CloseWrite(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}
