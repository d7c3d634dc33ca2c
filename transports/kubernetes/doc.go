// Package kubernetes is the Kubernetes transport: each kernel runs in a pod of its own that
// the controller makes through the API server (k8s.io/client-go), and its frames travel
// over an `exec -i` stream through the API server: stdio over the API, with the frame gate
// and the path map kept at the controller.
//
//	cli, err := kubernetes.Connect(ctx, kubernetes.ConnectOptions{}) // KUBECONFIG, ~/.kube/config, in-cluster
//	if err != nil {
//		return err // transports.ErrUnavailable: no configuration, no API server
//	}
//	// At the first use: remove the pods of controllers of this host that are gone.
//	if _, err := kubernetes.Sweep(ctx, cli, kubernetes.SweepOptions{Keep: func(string) bool { return true }}); err != nil { ... }
//	tr, err := kubernetes.New(cli, kubernetes.Options{Namespace: "kennel"})
//	k, err := tr.Start(ctx, transports.Spec{SessionID: "s1", Dir: "/tmp"})
//
// # Pods and exec streams
//
// A kernel's pod (labels LabelKennel, LabelSession, LabelController, LabelPod; the exact
// session id and the controller's identity, docker.Controller, in annotations) runs one
// container, Container, from the kernel image: Options.Image, by default Ref of the
// embedded stub (what `kennel image build` makes, as kubelet names `docker save`'s
// kennel-kernel:<hash>), never pulled (imagePullPolicy Never unless Options.PullPolicy).
// Its main process is a small init (init.py) that keeps the pod alive, reaps orphans,
// passes the pod's TERM on to the kernel, and ends the pod once its kernel has been gone
// for 30 s (a controller killed mid-session leaves a pod that holds no resources). The
// kernel is an exec in that container, made with remotecommand.NewFallbackExecutor:
// WebSocket (subprotocol v5, whose CLOSE carries stdin's end) first, SPDY when the server
// does not upgrade. Its working directory and whole environment come in a start block on
// stdin (transports/internal/kernelstart), never in the pod's spec or the exec's argv,
// which anyone who may read pods can read.
//
// Each exec is one long-running request of the API server (not counted against its
// in-flight limits), proxied to the kubelet, over a connection of its own: what limits a
// controller is how many such streams the API server, the kubelet and the container
// runtime sustain at once. BenchmarkExecStreams measures it; on the 2-CPU test machine
// (API server, kubelet, containerd and controller on one box) one client held 800 streams
// open at once without a failure, each costing about 0.1-0.25 MiB in the API server, 1 MiB
// in the kubelet, 2-2.7 MiB in the cluster as a whole (its exec process included) and
// 0.24 MiB in the client; opening one took 35-60 ms of the box's CPU, so the box's CPU,
// not a limit of the API server's, bounded how fast they opened.
//
// # The lock-down
//
// The pod spec (podSpec; each default loosened by one field of Options) runs the kernel as
// a numeric non-root uid:gid (runAsNonRoot; the Docker transport's default user), with no
// supplementary group but its own gid, every capability dropped, no privilege escalation,
// the runtime's default seccomp profile, a read-only root file system with a memory-backed
// emptyDir at /tmp, requests equal to limits (1 GiB, one CPU), no service-account token,
// no service links, restartPolicy Never, and no host network, pid or ipc namespace. The
// number of processes is bounded by the node (the kubelet's podPidsLimit; a pod spec
// cannot set it). A NetworkPolicy made before the pod denies it all ingress and egress; it
// takes effect only where the cluster's network plugin enforces NetworkPolicies (Calico,
// Cilium, ...): a plugin that does not (the bridge plugin, kubenet, flannel alone) leaves
// the pod the network the plugin gives it. The test cluster's bridge (kubetest) gives a
// pod its loopback and the bridge's subnet (other pods) and no route beyond it.
//
// # Files
//
// The path map's mounts (Options.Mounts) are hostPath volumes on Options.Node, which
// must be given with them and names the node whose files they are: the controller's own,
// where it serves fs.* requests through the path map. A PersistentVolumeClaim
// (Options.Claims) is served only where the controller has the same volume mounted
// (Claim.Host); otherwise Options.HostFiles says why not and the session answers fs.*
// requests unavailable (Unserved).
//
// # Lifetime
//
// Kill closes the kernel's stdin (the stub shuts down at EOF), waits Options.StdinGrace,
// deletes the pod with its grace (Options.StopGrace: the TERM reaches the kernel, the
// kubelet kills at the grace's end), then deletes it by force; Wait returns once the exec
// has ended and the pod and its NetworkPolicy are gone. A kernel killed by its memory
// limit reports Exit.OOM, which the controller turns into controller.ErrOOM. A node that
// lacks the image fails the start at once (ErrImageMissing, naming the image and the
// commands that make and import it); a pod that does not run within
// Options.PendingTimeout fails it with the scheduler's reason (ErrPending). Sweep, which
// a controller runs at its first use of a cluster, removes the pods and NetworkPolicies
// of controllers of its host that are gone, by the Docker transport's rule.
//
// A controller that runs in the cluster sets Options.Owner to its own pod: the garbage
// collector then deletes its kernels' pods and policies with it, wherever it was
// rescheduled to (Sweep judges only controllers of its own host).
//
// # Permissions
//
// In its namespace the controller needs pods: create, get, list, watch, delete (and patch
// for a Pool, which labels a pod with its session at hand-out);
// pods/exec: create and get (WebSocket exec is a GET); networkpolicies: create, list,
// delete; events: list (the reason of a pod that stays pending); and, for LocalNode,
// nodes: list.
//
// # Detached kernels
//
// With Options.Detached each pod also has an emptyDir at RunRoot: the kernel's start exec
// runs the start program with the bridge before it (kernelstart.DetachedProgram), which
// forks the kernel with its run directory there and relays its own stream to the
// kernel's socket; every later connection is an exec of the bridge's attach, so the
// kernel outlives any stream, and its controller (kernelstart.Bridged). Transport.Reattach
// reaches it again from its transports.Record, whose Where is "namespace/pod". The pod
// lives while the kernel does (Options.KernelGrace with nothing attached), and is removed
// once the kernel is proven gone.
//
// # Warm pool
//
// A Pool (Options.Pool) keeps detached kernels started before their sessions in pods on
// the controller's own node: each pod's start exec runs the start program in pooled mode
// (docs/protocol.md), which holds the loaded kernel until its start block; the node's
// container runtime, asked over CRI (PoolOptions.Runtime), names the container's host
// process, whose mount namespace the pool holds. A hand-out mounts the session's
// directories there (as hostPath volumes would have been), labels the pod with the
// session, and sends the start block; the exec is then the kernel's first connection.
package kubernetes
