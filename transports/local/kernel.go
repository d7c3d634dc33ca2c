package local

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/kennel-dev/kennel/internal/reaper"
	"github.com/kennel-dev/kennel/transports"
)

// reaperGrace is how long Kill waits for a reaper told to kill hard before it SIGKILLs
// the reaper itself.
const reaperGrace = 5 * time.Second

// kernel is a local kernel: a reaper process running the stub.
type kernel struct {
	proc       *reaper.Process
	stdin      *os.File
	stdout     *eofCloser
	info       transports.Info
	stdinGrace time.Duration
	termGrace  time.Duration

	killCalled atomic.Bool
	ladder     *transports.Ladder

	finished chan struct{} // closed once exit and err are set
	exit     transports.Exit
	err      error
}

func newKernel(proc *reaper.Process, stdin, stdout *os.File, stdinGrace, termGrace time.Duration) *kernel {
	k := &kernel{
		proc:       proc,
		stdin:      stdin,
		stdout:     &eofCloser{f: stdout},
		info:       transports.Info{Transport: Name, PID: proc.KernelPID(), HostPIDs: true},
		stdinGrace: stdinGrace,
		termGrace:  termGrace,
		finished:   make(chan struct{}),
	}
	k.newLadder()
	go k.watch()
	return k
}

// watch records the exit when the reaper has been reaped: by then the kernel and
// everything it started are gone.
func (k *kernel) watch() {
	st, err := k.proc.Wait()
	k.exit = transports.Exit{Code: st.Code, Signal: int(st.Signal), Killed: k.killCalled.Load()}
	if err != nil {
		k.err = fmt.Errorf("local kernel %d: %w", k.info.PID, err)
	}
	k.stdin.Close() // nobody reads it any more; a blocked Write returns
	close(k.finished)
}

// Stdin is the kernel's standard input (an *os.File). Closing it asks the kernel to end.
func (k *kernel) Stdin() io.WriteCloser { return k.stdin }

// Stdout is the kernel's standard output. It reaches EOF once the kernel and everything
// that held it are gone, and releases its descriptor at EOF (or at the first error).
func (k *kernel) Stdout() io.Reader { return k.stdout }

// Info reports the kernel's pid (the Python process, leader of its own process group).
func (k *kernel) Info() transports.Info { return k.info }

// Kill ends the kernel in stages: close stdin and wait StdinGrace; tell the reaper to
// forward SIGTERM to the kernel's process group and wait TermGrace; tell it to SIGKILL the
// kernel's group and every descendant; as a last resort SIGKILL the reaper. Each stage is
// skipped once the reaper has been reaped, which is the only confirmation Kill takes.
//
// The stages run once, whoever calls Kill and however often; if ctx ends first, Kill
// returns ctx's cause and the stages go on.
func (k *kernel) Kill(ctx context.Context) error {
	k.killCalled.Store(true)
	return k.ladder.Kill(ctx, fmt.Sprintf("local kernel %d", k.info.PID))
}

// newLadder sets up the kill stages of Kill.
func (k *kernel) newLadder() {
	k.ladder = &transports.Ladder{Ended: k.finished, Steps: []transports.Step{
		{Act: func() { k.stdin.Close() }, Grace: k.stdinGrace},
		{Act: func() { _ = k.proc.Terminate() }, Grace: k.termGrace},
		{Act: func() { _ = k.proc.Kill() }, Grace: reaperGrace},
		{Act: func() { _ = k.proc.KillReaper() }},
	}}
}

// Wait blocks until the reaper has been reaped, that is until the kernel and everything
// it started are gone, and reports how the kernel ended. Exit.Killed reports that Kill
// was called before the end was seen. An error (matching reaper.ErrLost) means the reaper
// itself was killed from outside and the kernel's status is unknown.
func (k *kernel) Wait() (transports.Exit, error) {
	<-k.finished
	return k.exit, k.err
}

// eofCloser closes its file once a Read returns an error (EOF included), so a caller that
// reads to the end releases the descriptor; later Reads return the same error. Only one
// goroutine may read at a time.
type eofCloser struct {
	f   *os.File
	err error
}

func (r *eofCloser) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	n, err := r.f.Read(p)
	if err != nil {
		r.err = err
		r.f.Close()
	}
	return n, err
}
