package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/kennel-dev/kennel/launch"
	"github.com/kennel-dev/kennel/sessionspec"
	"github.com/kennel-dev/kennel/settings"
	ctrd "github.com/kennel-dev/kennel/transports/containerd"
)

// transportFlags are the flags of `kennel run` and `kennel create` that say where the
// kernel runs; each names a kind of sessionspec.Transport, and at most one may be given.
type transportFlags struct {
	// argv (--transport-argv) runs the kernel under this wrapper.
	argv string
	// ssh (--ssh [user@]host[:port]) runs the kernel on that host; -C is then a remote path.
	ssh string
	// docker (--docker and its lock-down flags) runs the kernel in a container. Every
	// empty field is the Docker transport's locked-down default.
	docker       bool
	dockerFields sessionspec.Docker
	// containerd (--containerd, --address and the lock-down flags it shares with --docker)
	// runs the kernel as the task of a container in containerd.
	containerd bool
	address    string
	// kubernetes (--kubernetes, its cluster flags and the lock-down flags it shares with
	// --docker: image, network, memory, cpus, user) runs the kernel in a pod.
	kubernetes bool
	kube       sessionspec.Kubernetes
	// local (--local) runs a host kernel whatever the settings say.
	local bool
}

// addTransportFlags registers the transport flags on fs.
func addTransportFlags(fs *pflag.FlagSet, f *transportFlags) {
	fs.StringVar(&f.argv, "transport-argv", "", "run the kernel under this wrapper ('docker exec -i box' or a JSON array); the kernelTransport setting's python, pathMap and env still apply")
	fs.StringVar(&f.ssh, "ssh", "", "run the kernel on this host over ssh ([user@]host[:port]); -C names the remote working directory (default: the remote home)")
	fs.BoolVar(&f.local, "local", false, "run a local (host) kernel whatever the kernelTransport setting says")
	fs.BoolVar(&f.docker, "docker", false, "run the kernel in a locked-down Docker container (build its image once with `kennel image build`); the kernelTransport setting's python, pathMap and env still apply")
	fs.BoolVar(&f.containerd, "containerd", false, "run the kernel in a locked-down container of containerd (import its image once with `kennel image build --containerd`); the kernelTransport setting's python, pathMap and env still apply")
	fs.StringVar(&f.address, "address", "", "with --containerd: the daemon's socket (default "+ctrd.DefaultAddress+")")
	fs.BoolVar(&f.kubernetes, "kubernetes", false, "run the kernel in a locked-down pod of a Kubernetes cluster (its nodes need the kernel image); the kernelTransport setting's python, pathMap and env still apply")
	fs.StringVar(&f.kube.Kubeconfig, "kubeconfig", "", "with --kubernetes: the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
	fs.StringVar(&f.kube.Context, "context", "", "with --kubernetes: the kubeconfig context (default: its current one)")
	fs.StringVar(&f.kube.Namespace, "namespace", "", "with --kubernetes: the namespace of the pods (default: the context's)")
	fs.StringVar(&f.kube.Node, "node", "", "with --kubernetes: pin the pod to this node (required with a pathMap: the controller's own node, whose directories become hostPath volumes)")
	d := &f.dockerFields
	fs.StringVar(&d.Image, "image", "", "with --docker, --containerd or --kubernetes: the kernel image (default kennel-kernel:<stub hash>)")
	fs.StringVar(&d.Container, "docker-exec", "", "with --docker: run the kernel as an exec in this existing container instead")
	fs.StringVar(&d.Network, "network", "", "with --docker: network: none (default), bridge or a network's name; with --containerd: none only; with --kubernetes: none (default: a NetworkPolicy denies all) or cluster")
	fs.StringVar(&d.Memory, "memory", "", "with --docker, --containerd or --kubernetes: memory limit, e.g. 512m or 2g (default 1g; -1: none)")
	fs.StringVar(&d.CPUs, "cpus", "", "with --docker, --containerd or --kubernetes: CPU limit, e.g. 0.5 or 2 (default 1; -1: none)")
	fs.Int64Var(&d.Pids, "pids", 0, "with --docker or --containerd: process and thread limit (default 256; -1: none)")
	fs.StringVar(&d.Runtime, "runtime", "", "with --docker: OCI runtime, e.g. runsc (default: the engine's); with --containerd: a shim (io.containerd.runsc.v1) or an OCI runtime binary the runc shim runs (runsc: gVisor) (default: runc)")
	fs.StringVar(&d.User, "user", "", "with --docker, --containerd or --kubernetes: the kernel's uid:gid (default: yours; never root unless 0:0, and never root in a pod)")
}

// given reports whether a transport flag was given.
func (f transportFlags) given() bool {
	return f.argv != "" || f.ssh != "" || f.docker || f.containerd || f.kubernetes || f.local || f.address != "" ||
		f.dockerFields != (sessionspec.Docker{}) || f.kube != (sessionspec.Kubernetes{})
}

// spec returns the description of the flags over base, the kernelTransport setting in
// effect (nil: none): no flag keeps base; --local is a local kernel; --ssh the host (the
// setting's fields are this machine's and do not apply); --transport-argv, --docker and
// --containerd take the kind and keep base's python, pathMap and env. Flags that cannot
// go together, lock-down flags without --docker or --containerd, --docker-exec without
// --docker and --address without --containerd are a usage error (exit 2).
func (f transportFlags) spec(base *sessionspec.Transport, remoteDir string) (*sessionspec.Transport, error) {
	n := 0
	for _, b := range []bool{f.argv != "", f.ssh != "", f.docker, f.containerd, f.kubernetes, f.local} {
		if b {
			n++
		}
	}
	if n > 1 {
		return nil, &exitError{code: 2, msg: "--local, --transport-argv, --docker, --containerd, --kubernetes and --ssh each name where the kernel runs: give one"}
	}
	if !f.docker && !f.containerd && !f.kubernetes && f.dockerFields != (sessionspec.Docker{}) {
		return nil, &exitError{code: 2, msg: "--image, --network, --memory, --cpus, --pids, --runtime and --user go with --docker, --containerd or --kubernetes, --docker-exec with --docker"}
	}
	if f.kubernetes && (f.dockerFields.Container != "" || f.dockerFields.Pids != 0 || f.dockerFields.Runtime != "") {
		return nil, &exitError{code: 2, msg: "--docker-exec, --pids and --runtime do not go with --kubernetes (the node's runtime and the kubelet's pid limit apply)"}
	}
	if !f.kubernetes && f.kube != (sessionspec.Kubernetes{}) {
		return nil, &exitError{code: 2, msg: "--kubeconfig, --context, --namespace and --node go with --kubernetes"}
	}
	if f.containerd && f.dockerFields.Container != "" {
		return nil, &exitError{code: 2, msg: "--docker-exec goes with --docker, not --containerd"}
	}
	if !f.containerd && f.address != "" {
		return nil, &exitError{code: 2, msg: "--address goes with --containerd"}
	}
	if !f.given() {
		return base, nil
	}
	out := &sessionspec.Transport{}
	if base != nil && !f.local && f.ssh == "" {
		out.Python, out.PathMap, out.Env = base.Python, base.PathMap, base.Env
	}
	switch {
	case f.local:
		out.Local = &sessionspec.Local{}
	case f.ssh != "":
		out.SSH = &sessionspec.SSH{Target: f.ssh, Dir: remoteDir}
	case f.docker:
		d := f.dockerFields
		out.Docker = &d
	case f.kubernetes:
		d, k := f.dockerFields, f.kube
		k.Image, k.Network, k.Memory, k.CPUs, k.User = d.Image, d.Network, d.Memory, d.CPUs, d.User
		out.Kubernetes = &k
	case f.containerd:
		d := f.dockerFields
		out.Containerd = &sessionspec.Containerd{Address: f.address, Image: d.Image, Runtime: d.Runtime, Network: d.Network,
			Memory: d.Memory, CPUs: d.CPUs, Pids: d.Pids, User: d.User}
	default:
		argv, err := settings.ParseArgv(f.argv)
		if err != nil {
			return nil, &exitError{code: 2, msg: fmt.Sprintf("--transport-argv: %v", err)}
		}
		out.ArgvPrefix = argv
	}
	return out, nil
}

// resolve returns the description a session at dir (a host path; for --ssh, remoteDir
// is the remote one) runs with: spec over the kernelTransport setting of the project at
// dir (the global settings only with --ssh, whose project is remote), and the settings
// read. A setting that cannot be used is an error unless a flag replaces it whole
// (--local, --ssh).
func (f transportFlags) resolve(dir, remoteDir string) (*sessionspec.Transport, *settings.Result, error) {
	project := dir
	if f.ssh != "" {
		project = ""
	}
	base, r, err := launch.FromSettings(project)
	if r == nil {
		return nil, nil, err
	}
	spec, ferr := f.spec(base, remoteDir)
	if ferr != nil {
		return nil, r, ferr
	}
	if err != nil && !f.local && f.ssh == "" {
		return nil, r, err
	}
	return spec, r, nil
}
