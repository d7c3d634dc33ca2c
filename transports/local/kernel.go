package local

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/kennel-dev/kennel/internal/reaper"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
)

// reaperGrace is how long Kill waits for a reaper told to kill hard before it SIGKILLs
// the reaper itself.
const reaperGrace = 5 * time.Second

// kernel is a local kernel: a reaper process running the stub.
type kernel struct {
	stdin  *os.File
	stdout *kernelstart.PipeReader
	info   transports.Info
	watch  *transports.Watch
}

// newKernel watches proc: its end is the reaper's reaping, by which time the kernel and
// everything it started are gone. Kill's stages: close stdin and wait stdinGrace; tell
// the reaper to forward SIGTERM to the kernel's process group and wait termGrace; tell it
// to SIGKILL the kernel's group and every descendant and wait reaperGrace; SIGKILL the
// reaper itself.
func newKernel(proc *reaper.Process, stdin, stdout *os.File, stdinGrace, termGrace time.Duration) *kernel {
	k := &kernel{
		stdin:  stdin,
		stdout: kernelstart.NewPipeReader(stdout),
		info:   transports.Info{Transport: Name, PID: proc.KernelPID(), HostPIDs: true},
	}
	k.watch = transports.NewWatch(transports.WatchSpec{
		What: fmt.Sprintf("local kernel %d", k.info.PID),
		Steps: []transports.Step{
			{Act: func() { stdin.Close() }, Grace: stdinGrace},
			{Act: func() { _ = proc.Terminate() }, Grace: termGrace},
			{Act: func() { _ = proc.Kill() }, Grace: reaperGrace},
			{Act: func() { _ = proc.KillReaper() }},
		},
		Reap: func(func() bool) (transports.Exit, error) {
			st, err := proc.Wait()
			stdin.Close() // nobody reads it any more; a blocked Write returns
			if err != nil {
				err = fmt.Errorf("local kernel %d: %w", k.info.PID, err)
			}
			return transports.Exit{Code: st.Code, Signal: int(st.Signal)}, err
		},
	})
	return k
}

// Stdin is the kernel's standard input (an *os.File). Closing it asks the kernel to end.
func (k *kernel) Stdin() io.WriteCloser { return k.stdin }

// Stdout is the kernel's standard output. It reaches EOF once the kernel and everything
// that held it are gone, and releases its descriptor at EOF (or at the first error).
func (k *kernel) Stdout() io.Reader { return k.stdout }

// Info reports the kernel's pid (the Python process, leader of its own process group).
func (k *kernel) Info() transports.Info { return k.info }

// Kill ends the kernel in the stages newKernel lists; the reaper's reaping is the only
// confirmation it takes.
func (k *kernel) Kill(ctx context.Context) error { return k.watch.Kill(ctx) }

// Wait blocks until the reaper has been reaped, that is until the kernel and everything
// it started are gone, and reports how the kernel ended. Exit.Killed reports that Kill
// was called before the end was seen. An error (matching reaper.ErrLost) means the reaper
// itself was killed from outside and the kernel's status is unknown.
func (k *kernel) Wait() (transports.Exit, error) { return k.watch.Wait() }
