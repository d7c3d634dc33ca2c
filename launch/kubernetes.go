package launch

import (
	"cmp"
	"context"
	"fmt"

	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/sessionspec"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/kubernetes"
)

// kubeKey names a cluster connection: a kubeconfig file and a context of it.
type kubeKey struct{ config, context string }

// kubernetesOptions is the transport's options for d, the description's kubernetes
// fields, with mounts as its hostPath volumes.
func (k *Kit) kubernetesOptions(d *sessionspec.Kubernetes, mounts []pathmap.Mount) (kubernetes.Options, error) {
	o := k.opts.Kubernetes
	o.Namespace = cmp.Or(d.Namespace, o.Namespace)
	o.Image = cmp.Or(d.Image, o.Image)
	o.Node = cmp.Or(d.Node, o.Node)
	o.User = cmp.Or(d.User, o.User)
	if d.Network == "cluster" {
		o.AllowNetwork = true
	}
	mem, nano, err := limits(d)
	if err != nil {
		return o, err
	}
	o.Memory = cmp.Or(mem, o.Memory)
	switch {
	case nano < 0:
		o.MilliCPU = -1
	case nano > 0:
		o.MilliCPU = max(1, nano/1_000_000)
	}
	o.Mounts = mounts
	return o, nil
}

// kubernetes assembles a pod kernel. With a pathMap (and kubernetes.node, the
// controller's own node) its mounts are hostPath volumes and fs.* is served through the
// path map from the same files; without one the pod shares no files with the controller:
// the kernel works in its pod's /tmp and fs.* answers unavailable, saying why.
func (k *Kit) kubernetes(ctx context.Context, spec *sessionspec.Transport, dir string, p *Parts) error {
	d := spec.Kubernetes
	var mounts []pathmap.Mount
	sandboxDir := "/tmp"
	if len(spec.PathMap) > 0 {
		var err error
		if mounts, sandboxDir, err = probeMounts(spec, dir); err != nil {
			return err
		}
	}
	o, err := k.kubernetesOptions(d, mounts)
	if err != nil {
		return err
	}
	if len(mounts) > 0 {
		if err := ownedMap(k, spec, dir, sandboxDir, p, "kubernetes.user", o.UserFor); err != nil {
			return err
		}
	} else {
		m, err := pathmap.New(pathmap.Config{Dir: sandboxDir, Mounts: []pathmap.Mount{{Sandbox: sandboxDir, Host: sandboxDir}}})
		if err == nil {
			k.env(spec, m, p) // no mounts: the host's values pass unmapped
			m.Close()
		}
		p.Dir, p.Remote, p.SandboxDir = sandboxDir, true, sandboxDir
		p.Handler = kubernetes.Unserved{Reason: fmt.Errorf("the kernel's pod shares no files with the controller: give the session a pathMap and kubernetes.node (the controller's own node) to serve fs requests: %w", transports.ErrUnavailable)}
	}
	cli, err := k.kubeClient(ctx, d.Kubeconfig, d.Context)
	if err != nil {
		return err
	}
	if o.Detached {
		o.Pool = k.kubePoolFor(d)
	}
	tr, err := kubernetes.New(cli, o)
	if err != nil {
		return err
	}
	if err := k.kubeSweep(ctx, cli, tr.Namespace()); err != nil {
		return err
	}
	p.Transport, p.Python = tr, spec.Python
	return nil
}

// kubeClient returns the Kit's client of the cluster a kubeconfig and context name,
// connecting on first use. Sessions on the same daemon share it.
func (k *Kit) kubeClient(ctx context.Context, config, kctx string) (*kubernetes.Client, error) {
	key := kubeKey{config, kctx}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, fmt.Errorf("kubernetes: kit closed: %w", transports.ErrUnavailable)
	}
	if cli := k.kube[key]; cli != nil {
		return cli, nil
	}
	cli, err := kubernetes.Connect(ctx, kubernetes.ConnectOptions{Kubeconfig: config, Context: kctx})
	if err != nil {
		return nil, err
	}
	if k.kube == nil {
		k.kube = map[kubeKey]*kubernetes.Client{}
	}
	k.kube[key] = cli
	return cli, nil
}

// kubeSweep removes, once per namespace, the pods that controllers which are gone left
// there (kubernetes.Sweep; detached pods a record may hold are kept).
func (k *Kit) kubeSweep(ctx context.Context, cli *kubernetes.Client, ns string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.kubeSwept[ns] {
		return nil
	}
	so := kubernetes.SweepOptions{Namespace: ns, Self: k.opts.Kubernetes.Controller, Keep: func(string) bool { return true }}
	if _, err := kubernetes.Sweep(ctx, cli, so); err != nil {
		return fmt.Errorf("kubernetes namespace %s sweep: %w", ns, err)
	}
	if k.kubeSwept == nil {
		k.kubeSwept = map[string]bool{}
	}
	k.kubeSwept[ns] = true
	return nil
}
