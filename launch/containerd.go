package launch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	ctrdclient "github.com/containerd/containerd/v2/client"

	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/sessionspec"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/containerd"
)

// ctrdAddress is a containerd address as the Kit keys its clients: no unix:// scheme,
// empty as containerd.DefaultAddress.
func ctrdAddress(addr string) string {
	return cmp.Or(strings.TrimPrefix(addr, "unix://"), containerd.DefaultAddress)
}

// containerdOptions is the transport's options for c, the description's containerd
// fields, with mounts as its bind mounts.
func (k *Kit) containerdOptions(c *sessionspec.Containerd, mounts []pathmap.Mount) (containerd.Options, error) {
	o := k.opts.Containerd
	o.Image = cmp.Or(c.Image, o.Image)
	o.Runtime = cmp.Or(c.Runtime, o.Runtime)
	o.User = cmp.Or(c.User, o.User)
	o.Pids = cmp.Or(c.Pids, o.Pids)
	mem, nano, err := limits(c)
	if err != nil {
		return o, err
	}
	o.Memory = cmp.Or(mem, o.Memory)
	switch {
	case nano < 0:
		o.CPUQuota = -1
	case nano > 0:
		// CFS quota per containerd.DefaultCPUPeriod (100 ms): a CPU is 100 000 µs.
		o.CPUQuota = max(1_000, nano*containerd.DefaultCPUPeriod/1_000_000_000)
	}
	o.Mounts = mounts
	return o, nil
}

func (k *Kit) containerd(ctx context.Context, spec *sessionspec.Transport, dir string, p *Parts) error {
	mounts, sandboxDir, err := probeMounts(spec, dir)
	if err != nil {
		return err
	}
	o, err := k.containerdOptions(spec.Containerd, mounts)
	if err != nil {
		return err
	}
	if err := ownedMap(k, spec, dir, sandboxDir, p, "containerd.user", o.UserFor); err != nil {
		return err
	}
	addr := spec.Containerd.Address
	cli, err := k.containerdClient(ctx, addr)
	if err != nil {
		return err
	}
	o.Pool = k.ctrdPoolFor(ctrdAddress(addr))
	tr, err := containerd.New(cli, o)
	if err != nil {
		return err
	}
	// Check the image now: a missing or stale one fails the session at once, naming
	// `kennel image build --containerd` (with the daemon's --address when not the
	// default).
	if err := checkImage(ctx, cli, tr, containerd.Check); err != nil {
		if a := strings.TrimPrefix(addr, "unix://"); a != "" && a != containerd.DefaultAddress && (errors.Is(err, containerd.ErrImageMissing) || errors.Is(err, containerd.ErrImageStale)) {
			return fmt.Errorf("containerd %s: %w (give it --address %s)", addr, err, addr)
		}
		return fmt.Errorf("containerd %s: %w", cmp.Or(addr, containerd.DefaultAddress), err)
	}
	p.Transport, p.Python = tr, spec.Python
	return nil
}

// containerdClient returns the Kit's client of the containerd at addr (empty: the
// default), connecting and sweeping what controllers that are gone left there on first
// use. Sessions on the same daemon share it.
func (k *Kit) containerdClient(ctx context.Context, addr string) (*ctrdclient.Client, error) {
	addr = ctrdAddress(addr)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, fmt.Errorf("containerd %s: kit closed: %w", addr, transports.ErrUnavailable)
	}
	if cli := k.ctrd[addr]; cli != nil {
		return cli, nil
	}
	cli, err := containerd.Connect(ctx, containerd.ConnectOptions{Address: addr})
	if err != nil {
		return nil, err
	}
	so := containerd.SweepOptions{Keep: func(string) bool { return true }, Snapshotter: k.opts.Containerd.Snapshotter, FIFODir: k.opts.Containerd.FIFODir, Self: k.opts.Containerd.Controller}
	if _, err := containerd.Sweep(ctx, cli, so); err != nil {
		cli.Close()
		return nil, fmt.Errorf("containerd %s sweep: %w", addr, err)
	}
	if k.ctrd == nil {
		k.ctrd = map[string]*ctrdclient.Client{}
	}
	k.ctrd[addr] = cli
	return cli, nil
}
