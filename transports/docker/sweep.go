package docker

import (
	"context"
	"errors"
	"fmt"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/limits"
)

// SweepOptions say which kennel containers Sweep removes.
type SweepOptions struct {
	// Self is the sweeping controller. The zero value means Self().
	Self Controller
	// Keep reports whether a container of Self's own labelled with this session id
	// belongs to a session Self still has. Nil keeps none of Self's containers.
	Keep func(sessionID string) bool
	// Owner and Held, when both set, sweep detached kernels' containers too: one
	// labelled with Owner (LabelDetachedOwner) whose id Held does not hold (no record
	// of that state names it) is removed. Detached containers of other owners, or of
	// none, are kept: they end with their kernels' grace.
	Owner string
	Held  func(containerID string) bool
	// Pool is the instance of the live Pool of Owner's (Pool.Instance), whose ready
	// kernels' containers no record holds yet: they are kept. Empty keeps none.
	Pool string
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
	var err error
	if o.Self, err = o.Self.OrSelf(); err != nil {
		return res, err
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
		if !sweepable(c.ID, c.Labels, o) {
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
func sweepable(id string, labels map[string]string, o SweepOptions) bool {
	if labels[LabelDetached] == "1" {
		if o.Pool != "" && labels[LabelPool] == o.Pool {
			return false
		}
		return o.Owner != "" && o.Held != nil && labels[LabelDetachedOwner] == o.Owner && !o.Held(id)
	}
	owner, ok := ControllerOf(labels, LabelController)
	if !ok {
		return false
	}
	return owner.Sweepable(o.Self, o.Keep, labels[LabelSession])
}

// remove force-removes a container; one already gone is not an error.
func remove(ctx context.Context, cli client.APIClient, id string) error {
	_, err := cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		return fmt.Errorf("remove container %.12s: %w", id, err)
	}
	return nil
}

// waitRemoved waits until container id no longer exists (a removal under way, by
// AutoRemove or another call, has finished) or ctx ends.
func waitRemoved(ctx context.Context, cli client.APIClient, id string) error {
	for {
		_, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if cerrdefs.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("container %.12s still there: %w", id, context.Cause(ctx))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// DefaultPingTimeout bounds Connect's first contact with the engine when
// ConnectOptions.PingTimeout is zero.
const DefaultPingTimeout = 3 * time.Second

// ConnectOptions say which engine Connect reaches.
type ConnectOptions struct {
	// Client configures the engine client. Nil means client.FromEnv: the engine
	// DOCKER_HOST names (the local socket by default), with DOCKER_API_VERSION,
	// DOCKER_CERT_PATH and DOCKER_TLS_VERIFY, as `kennel run --docker` uses.
	Client []client.Opt
	// PingTimeout bounds the ping that checks the engine answers (and negotiates the API
	// version). Zero means DefaultPingTimeout; negative means ctx alone bounds it.
	PingTimeout time.Duration
}

// Connect returns a client of the engine o names once it answers a ping, the API
// version negotiated down to the engine's. An engine that cannot be reached or does not
// answer within the ping timeout (no socket, a refused or hung connection, a DOCKER_HOST
// that does not parse) is an error matching transports.ErrUnavailable, returned as soon
// as that is known; nothing is left open then. The caller closes the client.
func Connect(ctx context.Context, o ConnectOptions) (*client.Client, error) {
	opts := o.Client
	if opts == nil {
		opts = []client.Opt{client.FromEnv}
	}
	cli, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker engine: %w: %w", transports.ErrUnavailable, err)
	}
	pctx, cancel := limits.Context(ctx, o.PingTimeout, DefaultPingTimeout)
	defer cancel()
	if _, err := cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		if cause := context.Cause(ctx); cause != nil {
			return nil, fmt.Errorf("docker engine %s: %w", cli.DaemonHost(), cause) // the caller gave up
		}
		return nil, fmt.Errorf("docker engine %s: %w: %w", cli.DaemonHost(), transports.ErrUnavailable, err)
	}
	return cli, nil
}

// EngineSweepOptions configure SweepEngine.
type EngineSweepOptions struct {
	// ConnectOptions say which engine to sweep; the zero value is the one `kennel run
	// --docker` uses.
	ConnectOptions
	// Self is the sweeping controller. The zero value means Self().
	Self Controller
	// Owner, Held and Pool sweep detached kernels' containers too (SweepOptions).
	Owner string
	Held  func(containerID string) bool
	Pool  string
}

// SweepEngine is the sweep a controller runs when it starts, before or while it starts
// kernels: it connects to the engine (Connect) and removes the containers of the
// controllers of this host that are gone (Sweep's rule), and no other: Self's own
// containers are all kept, so it may run beside Self's starts. ctx bounds the whole
// sweep.
//
// With no engine to reach it returns at once, or within the ping timeout, an error
// matching transports.ErrUnavailable, having changed nothing: a controller that does not
// use Docker starts all the same, and may log that at debug level. Any other error (the
// engine answered but a list or a removal failed) is worth a warning.
func SweepEngine(ctx context.Context, o EngineSweepOptions) (SweepResult, error) {
	cli, err := Connect(ctx, o.ConnectOptions)
	if err != nil {
		return SweepResult{}, fmt.Errorf("sweep: %w", err)
	}
	defer cli.Close()
	return Sweep(ctx, cli, SweepOptions{Self: o.Self, Keep: func(string) bool { return true }, Owner: o.Owner, Held: o.Held, Pool: o.Pool})
}
