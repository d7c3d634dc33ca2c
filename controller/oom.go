package controller

import (
	"fmt"
	"time"

	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/transports"
)

// ErrOOM: the sandbox's memory limit ended the kernel.
var ErrOOM = errdefs.ErrResourceExhausted.WithMessage("kernel killed by the memory limit (OOM)")

// oomWait bounds how long a kernel whose stdout ended is waited for, to tell whether the
// memory limit ended it, before the work in flight fails.
const oomWait = 2 * time.Second

// withOOM returns err, joined with ErrOOM when the kernel (whose stdout has ended) was
// ended by the sandbox's memory limit, so a cell in flight fails with a typed OOM error
// rather than a generic exit. It waits for the kernel's exit at most oomWait: for the end
// alone where the kernel tells it before its release (transports.Ender: a container's
// removal, a pod's deletion, can take longer than that).
func (kc *kernelConn) withOOM(err error) error {
	var ended <-chan struct{}
	var exit func() transports.Exit
	if e, ok := kc.k.(transports.Ender); ok {
		ended, exit = e.Ended(), e.Exit
	} else {
		done, x := make(chan struct{}), transports.Exit{}
		go func() {
			x, _ = kc.k.Wait()
			close(done)
		}()
		ended, exit = done, func() transports.Exit { return x }
	}
	if closedWithin(ended, oomWait) && exit().OOM {
		return fmt.Errorf("%w: %w", err, ErrOOM)
	}
	return err
}

// closedWithin reports whether ch is closed within d (it waits at most d).
func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}
