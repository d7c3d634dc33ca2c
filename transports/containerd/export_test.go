package containerd

import (
	"context"
	"fmt"

	"github.com/kennel-dev/kennel/transports/docker"
)

// DaemonSweepOptions configure SweepDaemon.
type DaemonSweepOptions struct {
	// ConnectOptions say which containerd to sweep.
	ConnectOptions
	// Self is the sweeping controller. The zero value means docker.Self().
	Self docker.Controller
	// Snapshotter and FIFODir are as in SweepOptions.
	Snapshotter, FIFODir string
}

// SweepDaemon is the sweep a controller runs when it starts: it connects (Connect) and
// removes the objects of the controllers of this host that are gone (Sweep's rule), and no
// other: Self's own are all kept, so it may run beside Self's starts. With no daemon to
// reach it returns an error matching transports.ErrUnavailable, having changed nothing.
func SweepDaemon(ctx context.Context, o DaemonSweepOptions) (SweepResult, error) {
	cli, err := Connect(ctx, o.ConnectOptions)
	if err != nil {
		return SweepResult{}, fmt.Errorf("sweep: %w", err)
	}
	defer cli.Close()
	return Sweep(ctx, cli, SweepOptions{Self: o.Self, Keep: func(string) bool { return true }, Snapshotter: o.Snapshotter, FIFODir: o.FIFODir})
}
