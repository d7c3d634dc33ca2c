package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/docker/go-units"
	"github.com/spf13/pflag"

	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
)

// dockerFlags are the flags of `kennel run --docker`. Every zero value is the Docker
// transport's locked-down default.
type dockerFlags struct {
	enabled bool   // --docker: run the kernel in a container
	image   string // --image: the kernel image (default: kennel-kernel:<stub hash>)
	exec    string // --docker-exec: run as an exec in this existing container instead
	network string // --network: none (default), bridge or a named network
	memory  string // --memory: e.g. 512m, 2g; "0"/"" the default 1g; "-1" no limit
	cpus    string // --cpus: e.g. 0.5, 2; "" the default 1; "-1" no limit
	pids    int64  // --pids: 0 the default 256; -1 no limit
	runtime string // --runtime: e.g. runsc
	user    string // --user: uid:gid (default: the operator's)
}

// addDockerFlags registers the docker flags on fs.
func addDockerFlags(fs *pflag.FlagSet, f *dockerFlags) {
	fs.BoolVar(&f.enabled, "docker", false, "run the kernel in a locked-down Docker container (build its image once with `kennel image build`)")
	fs.StringVar(&f.image, "image", "", "with --docker: the kernel image (default kennel-kernel:<stub hash>)")
	fs.StringVar(&f.exec, "docker-exec", "", "with --docker: run the kernel as an exec in this existing container instead")
	fs.StringVar(&f.network, "network", "", "with --docker: network: none (default), bridge or a network's name")
	fs.StringVar(&f.memory, "memory", "", "with --docker: memory limit, e.g. 512m or 2g (default 1g; -1: none)")
	fs.StringVar(&f.cpus, "cpus", "", "with --docker: CPU limit, e.g. 0.5 or 2 (default 1; -1: none)")
	fs.Int64Var(&f.pids, "pids", 0, "with --docker: process and thread limit (default 256; -1: none)")
	fs.StringVar(&f.runtime, "runtime", "", "with --docker: OCI runtime, e.g. runsc (default: the engine's)")
	fs.StringVar(&f.user, "user", "", "with --docker: the kernel's uid:gid (default: yours; never root unless 0:0)")
}

// options turns the flags into docker.Options, refusing values that do not parse.
func (f dockerFlags) options(mounts []pathmap.Mount) (docker.Options, error) {
	o := docker.Options{
		Image: f.image, Container: f.exec, Network: f.network, Pids: f.pids,
		Runtime: f.runtime, User: f.user, Mounts: mounts,
	}
	switch m := strings.TrimSpace(f.memory); m {
	case "", "0":
	case "-1":
		o.Memory = -1
	default:
		v, err := units.RAMInBytes(m)
		if err != nil || v <= 0 {
			return o, fmt.Errorf("--memory %q: want a size such as 512m or 2g", f.memory)
		}
		o.Memory = v
	}
	switch c := strings.TrimSpace(f.cpus); c {
	case "", "0":
	case "-1":
		o.NanoCPUs = -1
	default:
		v, err := strconv.ParseFloat(c, 64)
		if err != nil || v <= 0 || v > 1024 || math.IsNaN(v) {
			return o, fmt.Errorf("--cpus %q: want a positive number such as 0.5 or 2", f.cpus)
		}
		o.NanoCPUs = int64(v * 1e9)
	}
	if f.pids < -1 {
		return o, fmt.Errorf("--pids %d: want a positive number, or -1 for none", f.pids)
	}
	return o, nil
}

// dockerTransport returns the Docker transport of a `kennel run --docker`: a client of
// the engine DOCKER_HOST names (the local socket by default), the flags' options with the
// path map's mounts as bind mounts, and, before any start, a sweep of the containers
// left by controllers that died (docker.Sweep). In run mode it checks the kernel image
// now, so a missing or stale one fails the run at once with an error naming
// `kennel image build`.
func dockerTransport(ctx context.Context, f dockerFlags, mounts []pathmap.Mount) (transports.Transport, error) {
	o, err := f.options(mounts)
	if err != nil {
		return nil, err
	}
	cli, err := engineClient(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := docker.Sweep(ctx, cli, docker.SweepOptions{}); err != nil {
		cli.Close()
		return nil, err
	}
	tr, err := docker.New(cli, o)
	if err == nil && o.Container == "" {
		err = checkImage(ctx, cli, tr)
	}
	if err != nil {
		cli.Close()
		return nil, err
	}
	return tr, nil
}
