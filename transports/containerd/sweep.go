package containerd

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/transports/docker"
)

// SweepOptions say which of kennel's objects Sweep removes.
type SweepOptions struct {
	// Self is the sweeping controller. The zero value means docker.Self().
	Self docker.Controller
	// Keep reports whether an object of Self's own labelled with this session id belongs
	// to a session Self still has. Nil keeps none of Self's objects.
	Keep func(sessionID string) bool
	// Snapshotter is the snapshotter whose snapshots are swept. Empty means
	// DefaultSnapshotter.
	Snapshotter string
	// FIFODir is where the transports' FIFO directories are. Empty means DefaultFIFODir().
	FIFODir string
}

// SweepResult says what Sweep did.
type SweepResult struct {
	// Removed lists the ids of the containers removed (with their tasks and snapshots).
	Removed []string
	// Snapshots and Leases count orphans removed: snapshots with no container (a start
	// killed half-way), leases of gone controllers.
	Snapshots, Leases int
	// Kept counts kennel containers left alone: a live controller's, another host's, or
	// one of Self's sessions that Keep kept.
	Kept int
}

// Sweep removes, in Namespace, kennel's containers that no live controller owns, with
// their tasks (killed) and snapshots, and detached kernels' containers whose task no longer
// runs (a running one is kept, whoever started it: it ends by its own grace); snapshots with no container and leases of such
// owners. An owner is gone when it is Self and Keep does not keep the session, or a
// controller of this host that is not running (docker.Controller.Alive: its pid is not
// running with the recorded start time, or the host rebooted). So a controller killed with
// SIGKILL leaves nothing once a controller runs again, and two live controllers never
// remove each other's. Objects whose owner labels are incomplete, or whose controller ran on
// another host, are kept. Errors of single removals are joined; the rest go on.
func Sweep(ctx context.Context, cli *client.Client, o SweepOptions) (SweepResult, error) {
	var res SweepResult
	var err error
	if o.Self, err = o.Self.OrSelf(); err != nil {
		return res, err
	}
	o.Snapshotter = cmp.Or(o.Snapshotter, DefaultSnapshotter)
	o.FIFODir = cmp.Or(o.FIFODir, DefaultFIFODir())
	ctx = nsCtx(ctx)
	filter := fmt.Sprintf(`labels.%q==1`, LabelKennel)
	var errs []error
	cs, err := cli.Containers(ctx, filter)
	if err != nil {
		return res, fmt.Errorf("sweep: list containers: %w", classify(err))
	}
	live := map[string]bool{}
	for _, c := range cs {
		labels, err := c.Labels(ctx)
		if err != nil {
			if !errdefs.IsNotFound(err) {
				errs = append(errs, err)
			}
			continue
		}
		detached := labels[LabelDetached] == "1"
		st := taskNotYet
		if detached {
			st = taskState(ctx, c) // attached kernels go by their owner alone: no task call
		}
		switch {
		case detached && st == taskLive:
			// A detached kernel outlives its controller: kept while its task runs.
			res.Kept++
			live[c.ID()] = true
			continue
		case detached && st == taskEnded:
			// Its kernel has ended (its grace ran out, or it was killed): removed, whoever
			// started it.
		case !sweepable(labels, o):
			// An attached kernel, or a detached one whose task never started (its start cut
			// short): the owner rule, so a start under way is never taken.
			res.Kept++
			live[c.ID()] = true
			continue
		}
		if err := remove(ctx, cli, c.ID(), o.FIFODir); err != nil {
			errs = append(errs, err)
			live[c.ID()] = true
			continue
		}
		res.Removed = append(res.Removed, c.ID())
	}
	// Snapshots of no container (a start killed between its snapshot and its container).
	sn := cli.SnapshotService(o.Snapshotter)
	var orphans []string
	if err := sn.Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		if live[info.Name] || !sweepable(info.Labels, o) {
			return nil
		}
		if _, err := cli.LoadContainer(ctx, info.Name); err == nil {
			return nil // a container made after the list: the next sweep decides
		}
		orphans = append(orphans, info.Name)
		return nil
	}, filter); err != nil {
		errs = append(errs, fmt.Errorf("walk snapshots: %w", err))
	}
	for _, name := range orphans {
		if err := sn.Remove(ctx, name); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove snapshot %s: %w", name, err))
			continue
		}
		res.Snapshots++
	}
	ls := cli.LeasesService()
	list, err := ls.List(ctx, filter)
	if err != nil {
		errs = append(errs, fmt.Errorf("list leases: %w", err))
	}
	for _, l := range list {
		if owner, ok := docker.ControllerOf(l.Labels, docker.LabelController); !ok || owner == o.Self {
			continue // Self's leases are its starts under way; they expire by themselves
		}
		if !sweepable(l.Labels, o) {
			continue
		}
		if err := ls.Delete(ctx, leases.Lease{ID: l.ID}); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete lease %s: %w", l.ID, err))
			continue
		}
		res.Leases++
	}
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("sweep: %w", err)
	}
	return res, nil
}

// The states of a container's task Sweep tells apart.
const (
	taskLive   = iota // running or paused, or unknown (an error: nothing live goes on a doubt)
	taskEnded         // stopped: its kernel has ended
	taskNotYet        // none, or created and never started
)

// taskState is the state of c's task.
func taskState(ctx context.Context, c client.Container) int {
	task, err := c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return taskNotYet
	}
	if err != nil {
		return taskLive
	}
	st, err := task.Status(ctx)
	switch {
	case errdefs.IsNotFound(err):
		return taskNotYet
	case err != nil:
		return taskLive
	case st.Status == client.Stopped:
		return taskEnded
	case st.Status == client.Created:
		return taskNotYet
	}
	return taskLive
}

// sweepable is Sweep's verdict on one object's labels.
func sweepable(labels map[string]string, o SweepOptions) bool {
	owner, ok := docker.ControllerOf(labels, docker.LabelController)
	if !ok {
		return false
	}
	return owner.Sweepable(o.Self, o.Keep, labels[LabelSession])
}
