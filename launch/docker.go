package launch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"

	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/images/kernelimage"
	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/sessionspec"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
)

// dockerOptions is the transport's options for d, the description's docker fields, with
// mounts as its bind mounts.
func (k *Kit) dockerOptions(d *sessionspec.Docker, mounts []pathmap.Mount) (docker.Options, error) {
	o := k.opts.Docker
	o.Image, o.Container, o.Network, o.Pids, o.Runtime, o.User = d.Image, d.Container, d.Network, d.Pids, d.Runtime, d.User
	var err error
	if o.Memory, o.NanoCPUs, err = limits(d); err != nil {
		return o, err
	}
	if d.Container == "" {
		o.Mounts = mounts
	} else {
		o.RunDir = "" // a host directory: an exec-mode kernel's run directory is in its container
	}
	return o, nil
}

func (k *Kit) docker(ctx context.Context, spec *sessionspec.Transport, dir string, p *Parts) error {
	mounts, sandboxDir, err := probeMounts(spec, dir)
	if err != nil {
		return err
	}
	o, err := k.dockerOptions(spec.Docker, mounts)
	if err != nil {
		return err
	}
	var owner *pathmap.Owner
	if o.Container == "" {
		o.Pool = k.pool()
		if own, ok := numericOwner(o.UserFor(sandboxDir)); ok {
			owner = otherOwner(own)
		}
	}
	m, err := hostMap(spec, dir, owner, p)
	if err != nil {
		return err
	}
	k.env(spec, m, p)
	cli, err := k.engineClient(ctx)
	if err != nil {
		return err
	}
	tr, err := docker.New(cli, o)
	if err != nil {
		return err
	}
	if o.Container == "" {
		// Check the image now: a missing or stale one fails the session at once, naming
		// `kennel image build`.
		if err := checkImage[client.APIClient](ctx, cli, tr, kernelimage.Check); err != nil {
			return err
		}
	}
	p.Transport, p.Python = tr, spec.Python
	return nil
}

// numericOwner parses a "uid:gid" user.
func numericOwner(user string) (pathmap.Owner, bool) {
	d := sessionspec.Docker{User: user}
	uid, gid, numeric, err := d.NumericUser()
	if !numeric || err != nil {
		return pathmap.Owner{}, false
	}
	return pathmap.Owner{UID: uid, GID: gid}, true
}

// engineClient returns the Kit's engine client, connecting (and sweeping the containers
// of controllers that are gone) on first use.
func (k *Kit) engineClient(ctx context.Context) (*client.Client, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, fmt.Errorf("docker engine: kit closed: %w", transports.ErrUnavailable)
	}
	if k.engine == nil {
		cli, err := docker.Connect(ctx, k.opts.Engine)
		if err != nil {
			return nil, err
		}
		k.engine = cli
	}
	if !k.swept {
		if _, err := docker.Sweep(ctx, k.engine, docker.SweepOptions{Keep: func(string) bool { return true }}); err != nil {
			return nil, fmt.Errorf("docker sweep: %w", err)
		}
		k.swept = true
	}
	return k.engine, nil
}

// SweepDocker removes the containers of controllers of this host that are gone, as a
// controller does when it starts (kennel serve). With no engine reachable it returns an
// error matching transports.ErrUnavailable at once and changes nothing.
//
// held, when not nil, says which detached kernels' containers a record of this Kit's
// state still holds: the Kit's other detached containers (labelled with its
// DetachedOwner) are removed too.
func (k *Kit) SweepDocker(ctx context.Context, held func(containerID string) bool) (docker.SweepResult, error) {
	o := docker.EngineSweepOptions{ConnectOptions: k.opts.Engine}
	if held != nil {
		o.Owner, o.Held = k.opts.Docker.DetachedOwner, held
		if p := k.pool(); p != nil {
			o.Pool = p.Instance()
		}
	}
	return docker.SweepEngine(ctx, o)
}

// DetachedOwner is the owner label of the detached containers of a state whose run
// directory is runDir: a digest of its absolute path.
func DetachedOwner(runDir string) string {
	if abs, err := filepath.Abs(runDir); err == nil {
		runDir = abs
	}
	sum := sha256.Sum256([]byte(runDir))
	return hex.EncodeToString(sum[:8])
}
