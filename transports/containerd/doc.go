// Package containerd is the containerd transport: each kernel is the task of a container
// of its own in a containerd daemon the operator runs (Kubernetes nodes, hardened hosts
// without Docker), driven through the containerd v2 client and an OCI runtime spec.
//
//	cli, err := containerd.Connect(ctx, containerd.ConnectOptions{}) // /run/containerd/containerd.sock
//	if err != nil {
//		return err // transports.ErrUnavailable: no daemon, or "containerd too old: need 1.6 or later"
//	}
//	defer cli.Close()
//	tr, err := containerd.New(cli, containerd.Options{Mounts: m.Mounts()})
//	k, err := tr.Start(ctx, transports.Spec{SessionID: "s1", Dir: "/work"})
//
// # Daemons
//
// It drives containerd 1.6 (Debian 12's 1.6.20) and later: only the container, task,
// content, image, snapshot, lease, namespace, version and event services, never the
// Transfer service, the Sandbox API or Introspection.PluginInfo, which 1.6 lacks; a daemon
// that answers errdefs.ErrNotImplemented is reported as "containerd too old". Everything
// lives in the namespace "kennel" (Namespace). The runtime is runc (DefaultRuntime) unless
// Options.Runtime names another shim, or an OCI runtime binary the runc shim runs in
// runc's place: "runsc" runs the kernel under gVisor (the lock-down tests run under both).
//
// # The image
//
// The kernel image is the Docker transport's (images/kernelimage), brought in with no
// registry: ImportFromDocker streams `docker save kennel-kernel:<hash>` into the content
// store and unpacks it, named Ref (the bundle hash's first 12 digits as its tag); or
// ImportArchive reads such an archive from anywhere. Start never pulls: a missing image, or
// one whose kernelimage.LabelBundle is not the embedded stub's, is an error naming
// BuildCommand.
//
// # The lock-down
//
// The spec (see Options; each default loosened by one field) runs the kernel as a numeric
// non-root uid:gid (the operator's), with every capability dropped, no new privileges, the
// default seccomp profile, the default masked and read-only paths, a read-only root file
// system with a tmpfs at /tmp, a network namespace with only loopback, its own pid, ipc,
// uts and mount namespaces, cgroup limits of 1 GiB memory (and memory+swap), one CPU and
// 256 pids, and the path map's mounts as bind mounts, read-only where the mount is. The
// kernel is the container's pid 1 (as the Docker transport's NoInit).
//
// # Stdio and lifetime
//
// The task's stdin, stdout and stderr are FIFOs under Options.FIFODir; each has one reader
// (the caller for stdout, a copier for stderr). Start waits on the task before starting it,
// so no exit is missed. Stdin's EOF is given only through CloseIO(WithStdinCloser): the
// shim holds a write end of its own, so closing ours alone would be a detach. Kill closes
// stdin, then signals SIGTERM and SIGKILL through the task; the end deletes the task, the
// container and its snapshot. The objects made for a kernel carry the Docker transport's
// owner labels, and the lease that holds them while they are made expires after LeaseTTL;
// Sweep (at a controller's start) removes what controllers that are gone left.
// A task ended by the memory limit (its OOM event, then SIGKILL) reports Exit.OOM, which
// the controller turns into controller.ErrOOM.
//
// # Detached kernels
//
// With Options.RunDir (the daemon sets it) each kernel is detached (docs/protocol.md,
// "Protocol 2"): its run directory RunDir/<id>, owned by the kernel's uid:gid, is bind
// mounted at ContainerRunRoot/<id>; the task's stdin carries the token (one line, then
// CloseIO), its stderr what the kernel says before its kernel.log takes over, its stdout
// is /dev/null; the controller dials kernel.sock across the container boundary (the same
// kernel's socket) and the task, held by containerd's shim, outlives the controller for
// Options.KernelGrace with nothing attached. Reattach reaches it from its record (the
// container id, the run directory); a container or task gone or stopped, or no kernel at
// the socket, proves it gone. Its container carries LabelDetached: Sweep keeps it while
// its task runs and removes it once the task has ended.
//
// A Pool (NewPool) keeps ready detached kernels of one description, tasks started with
// the stub loaded and waiting for a session, and Options.Pool hands one to a Start of that
// description, as the Docker transport's pool does (see its package doc, "Warm pools"):
// the session's mounts are attached in the task's mount namespace, then the start block
// gives the token, environment and working directory. Its containers carry LabelPool.
package containerd
