package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
)

// Kernel is a kernel running in a container (run mode) or as an exec (exec mode). It is
// single use and safe for concurrent use; see transports.Kernel.
type Kernel struct {
	info   transports.Info
	conn   client.HijackedResponse
	stdin  *kernelstart.Stdin
	stdout *kernelstart.CutReader
	watch  *transports.Watch // set by the mode's start

	demuxDone chan struct{} // closed when the attached stream has been read to its end

	// stopped is set when the stop stage was issued before the container's end was seen
	// (run mode; its SIGKILL then looks like an OOM kill). A Live rung sets it, so it is
	// final once the reap has seen the end.
	stopped bool
}

var _ transports.Kernel = (*Kernel)(nil)

// newKernel wires the attached stream: stdin writes go to conn, the multiplexed output is
// split into the stdout pipe and stderr (nil: discarded).
func newKernel(info transports.Info, conn client.HijackedResponse, stderr io.Writer) *Kernel {
	if stderr == nil {
		stderr = io.Discard
	}
	pr, pw := io.Pipe()
	k := &Kernel{
		info: info,
		conn: conn,
		stdin: kernelstart.NewStdin(conn.Conn, func() error {
			if err := conn.CloseWrite(); err != nil && !errors.Is(err, net.ErrClosed) {
				return err
			}
			return nil
		}),
		stdout:    kernelstart.NewCutReader(pr, func() { pr.CloseWithError(errStdoutCut) }),
		demuxDone: make(chan struct{}),
	}
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

// watch starts watching the kernel: what names it in Kill's errors; the first of Kill's
// stages closes stdin and waits stdinGrace, the mode's stages follow.
func (k *Kernel) watchWith(stdinGrace time.Duration, s transports.WatchSpec) {
	s.What = fmt.Sprintf("docker kernel %.12s", k.info.ID)
	s.Steps = append([]transports.Step{{Act: func() { _ = k.stdin.Close() }, Grace: stdinGrace}}, s.Steps...)
	k.watch = transports.NewWatch(s)
}

// Stdin is the kernel's standard input (the attached stream). Close ends it (the stub
// then shuts down); the container's stdin closes with it.
func (k *Kernel) Stdin() io.WriteCloser { return k.stdin }

// Stdout is the kernel's standard output, demultiplexed from the attached stream. What
// the kernel still wrote when it has ended, or when Kill's last stage has come, and
// nobody read within 2 s is dropped, and Stdout ends with EOF: an unread Stdout never
// keeps Kill or Wait from returning.
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
func (k *Kernel) Wait() (transports.Exit, error) { return k.watch.Wait() }

// Ended is closed once the kernel's end is known, before its release (transports.Ender).
func (k *Kernel) Ended() <-chan struct{} { return k.watch.Ended() }

// Exit returns how the kernel ended, once Ended is closed (transports.Ender).
func (k *Kernel) Exit() transports.Exit { return k.watch.Exit() }

// Kill ends the kernel in stages: close stdin and wait Options.StdinGrace for the stub to
// exit; then stop the container (SIGTERM, and SIGKILL after Options.StopGrace) and remove
// it, or, in exec mode, signal every process of the kernel TERM, then KILL after
// Options.StopGrace, through the container (an exec of its own: the controller never
// signals a pid of its host for an engine's process); last, 2 s on, drop the attach
// connection (and a Stdout nobody reads, which would hold the engine).
// It returns once the end is confirmed (Wait's result is set). The stages run once,
// whoever calls Kill and however often; if ctx ends first, Kill returns ctx's cause and
// the stages go on.
func (k *Kernel) Kill(ctx context.Context) error { return k.watch.Kill(ctx) }

// drain waits up to d for the attached stream to be read to its end, then closes the
// connection (which ends it) and waits up to d more for the demultiplexer; one still
// blocked then writes to a Stdout nobody reads, which is cut.
func (k *Kernel) drain(d time.Duration) {
	for range 2 {
		select {
		case <-k.demuxDone:
		case <-time.After(d):
		}
		k.conn.Close()
	}
	k.cut()
}

// cut ends Stdout unless it was read to its end (the write in flight fails, reads end
// with EOF), and waits for the demultiplexer. A demultiplexer that already ended blocks
// nothing: Stdout is left as it ended, so a broken stream's error still reaches its
// reader rather than a clean EOF.
func (k *Kernel) cut() {
	select {
	case <-k.demuxDone:
	default:
		k.stdout.Cut()
	}
	<-k.demuxDone
}

var errStdoutCut = errors.New("kernel stdout cut: nobody read it")
