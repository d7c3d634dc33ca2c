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
	t := time.NewTimer(oomWait)
	defer t.Stop()
	if e, ok := kc.k.(transports.Ender); ok {
		select {
		case <-e.Ended():
			if e.Exit().OOM {
				return fmt.Errorf("%w: %w", err, ErrOOM)
			}
		case <-t.C:
		}
		return err
	}
	ch := make(chan transports.Exit, 1)
	go func() {
		exit, _ := kc.k.Wait()
		ch <- exit
	}()
	select {
	case exit := <-ch:
		if exit.OOM {
			return fmt.Errorf("%w: %w", err, ErrOOM)
		}
	case <-t.C:
	}
	return err
}
