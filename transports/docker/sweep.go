package docker

import (
	"context"
	"errors"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// SweepOptions say which kennel containers Sweep removes.
type SweepOptions struct {
	// Self is the sweeping controller. The zero value means Self().
	Self Controller
	// Keep reports whether a container of Self's own labelled with this session id
	// belongs to a session Self still has. Nil keeps none of Self's containers.
	Keep func(sessionID string) bool
}

// SweepResult says what Sweep did.
type SweepResult struct {
	// Removed lists the ids of the containers removed.
	Removed []string
	// Kept counts kennel containers left alone: a live controller's, another host's, or
	// one of Self's sessions that Keep kept.
	Kept int
}

// Sweep removes kennel's containers that no live controller owns: those labelled with
// Self's own id whose session Keep does not keep, and those of a controller on this
// host that is gone (its pid is not running with the recorded start time, or the host
// rebooted since). So a controller killed with SIGKILL leaves no container once a
// controller runs again, and two live controllers never remove each other's. Containers
// whose owner labels are incomplete, or whose controller ran on another host, are kept.
// Every removal is forced (a running container is killed). Errors of single removals are
// joined; the rest go on.
func Sweep(ctx context.Context, cli client.APIClient, o SweepOptions) (SweepResult, error) {
	var res SweepResult
	if o.Self.IsZero() {
		self, err := Self()
		if err != nil {
			return res, err
		}
		o.Self = self
	}
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", LabelKennel+"=1"),
	})
	if err != nil {
		return res, fmt.Errorf("sweep: list containers: %w", err)
	}
	var errs []error
	for _, c := range list.Items {
		if !sweepable(c.Labels, o) {
			res.Kept++
			continue
		}
		if err := remove(ctx, cli, c.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		res.Removed = append(res.Removed, c.ID)
	}
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("sweep: %w", err)
	}
	return res, nil
}

// sweepable is Sweep's verdict on one container's labels.
func sweepable(labels map[string]string, o SweepOptions) bool {
	owner, ok := controllerFromLabels(labels)
	if !ok {
		return false
	}
	if owner == o.Self {
		return o.Keep == nil || !o.Keep(labels[LabelSession])
	}
	alive, known := owner.Alive(o.Self)
	return known && !alive
}

// remove force-removes a container; one already gone is not an error.
func remove(ctx context.Context, cli client.APIClient, id string) error {
	_, err := cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		return fmt.Errorf("remove container %.12s: %w", id, err)
	}
	return nil
}
