// Package docker runs kernels in Docker containers through the Engine API, locked down
// for untrusted code: the "docker" transport.
//
// It uses the official Engine API client, github.com/moby/moby/client. The older
// github.com/docker/docker module is frozen (its last tag, v28.5.2+incompatible, is a
// non-module release); moby split the client and the API types into their own Go modules
// (moby/moby/client, moby/moby/api), which is where maintenance and releases continue.
// The client negotiates the API version down to the engine's (1.40 and newer).
//
//	// At controller start: remove the containers of controllers that are gone.
//	if _, err := docker.SweepEngine(ctx, docker.EngineSweepOptions{}); err != nil { ... }
//	cli, err := docker.Connect(ctx, docker.ConnectOptions{})
//	if err != nil { ... } // errors.Is(err, transports.ErrUnavailable): no engine
//	defer cli.Close()
//	t, err := docker.New(cli, docker.Options{
//		Mounts: []pathmap.Mount{{Sandbox: "/work", Host: "/home/me/project"}},
//	})
//	if err != nil { ... }
//	k, err := t.Start(ctx, transports.Spec{SessionID: "s1", Dir: "/work"})
//	if err != nil { ... } // errors.Is(err, kernelimage.ErrImageMissing): run `kennel image build`
//	defer k.Kill(context.WithoutCancel(ctx))
//
// # Two modes
//
// Run mode (the default) starts one container per kernel from the kernel image
// (images/kernelimage, built offline by `kennel image build`; a session never pulls or
// builds). The path map's mounts are bind mounts, read-only where the mount is; the
// working directory is Spec.Dir; the kernel's stdin and stdout are the attached streams,
// stderr demultiplexed into Spec.Stderr. Exec mode (Options.Container) runs the kernel as
// an exec in an existing, operator-managed container, the `docker exec -i box` case, the
// stub sent over stdin; the frames are the same.
//
// # Locked down by default
//
// Each default is an Options field an operator can loosen: the kernel runs as a non-root
// uid:gid, the operator's own (so files it writes into a bind mount are the operator's
// on the host; see Options.User for a root operator); all capabilities dropped;
// no-new-privileges; a read-only root file system with a tmpfs /tmp; no network; 1 GiB
// of memory and no swap, one CPU, 256 pids; the engine's init process as pid 1 (it reaps
// zombies); Docker's default seccomp profile; an optional runtime (runsc).
//
// # Job output
//
// A run-mode container gets the session's job output directory
// (transports.Spec.JobOutDir) bind-mounted at ContainerJobOutDir when the engine is on
// this host (a unix socket) and the runtime shares its kernel (the default, runc, crun),
// and says so in Info.JobOutDir: the controller makes each shell job's stdout and stderr
// files there (regular files the job appends to) and tails them itself, so a job's bytes
// never pass through the kernel's Python, and a job outlives a controller that dies (its
// next one reads the files again). In a directory of mode 0711 holding only 0622 files of
// random names, the kernel's user can open a file it was named for writing and do nothing
// else (one of the controller's own uid may also list and read them: its own session's
// files). Elsewhere (exec mode, a remote engine, gVisor) jobs' output goes through frames.
//
// # Lifetime
//
// Kill closes the kernel's stdin (the stub shuts down at EOF), waits Options.StdinGrace,
// stops the container (SIGTERM, then SIGKILL after Options.StopGrace) and the container
// is removed; Wait returns once it is. An exec-mode kernel is signalled through its
// container instead: its exec carries a run marker (KENNEL_REMOTE_RUN), and an exec of its
// own, as the kernel's user, sends TERM, then KILL after Options.StopGrace, to every
// process of the container that carries it; the controller never signals the pid the
// engine reports for an exec, a pid of the engine's host, which need not be this one. A kernel killed by the memory limit reports
// Exit.OOM, which the controller turns into its typed ErrOOM; a cell's child killed by
// the limit while the kernel lives on does not (Kernel.Wait says how this is told).
//
// Every container is labelled as kennel's (LabelKennel), with its session (LabelSession)
// and its controller: host name, boot id, pid and the pid's start time (Controller). A
// controller killed with SIGKILL cannot remove its containers; their kernels end when
// the attach connection closes (stdin EOF), and the next controller's Sweep removes
// them, because their controller's pid no longer runs with that start time. Two live
// controllers never remove each other's containers, and containers of a controller on
// another host are left to that host. SweepEngine is that sweep for a controller's
// start (`kennel run --docker`, `kennel serve`): it connects to the engine itself and
// answers at once, or within DefaultPingTimeout, with an error matching
// transports.ErrUnavailable when there is no engine to reach.
//
// # Detached kernels
//
// With Options.RunDir kernels are detached (docs/protocol.md, "Protocol 2"): each
// outlives its connection and its controller, and Transport.Reattach reaches it again
// from its transports.Record (one method for both modes, the Transport's own mode
// deciding how).
//
// In run mode the run directory is on this host (RunDir/<id>, given to the kernel's
// user) and bind-mounted into the container at ContainerRunRoot/<id>: the kernel binds
// kernel.sock there and the controller dials it across the container boundary. The
// container (LabelDetached, no controller's labels, removed by the engine when the kernel
// exits) outlives the controller; Record.Where is its id. Kill sends shutdown over the
// link, then stops and removes the container; Wait reports the container's end, which the
// engine tells, also for a kernel let go (Detach). A Reattach whose container is gone or
// stopped, or whose socket has no kernel, finds it gone (errdefs.ErrNotFound) and
// removes what is left (the container, the run directory).
//
// In exec mode RunDir is a path in Options.Container and the kernel is reached through
// bridges, as the wrapped transport's are (transports/wrapped, "Detached kernels"): the
// start exec runs the start program with the bridge before it, reads the start block
// (Spec.Dir and the kernel's environment: never an exec's Env, which inspect shows),
// forks the kernel, and once the kernel's socket answers relays its attached stream to it,
// the link's first connection; every later connection is an exec of the bridge's attach
// (exit status 3: no kernel there, which proves it gone), the signals are execs of its
// signal (TERM, then KILL of the kernel's group, checked against the hello's pid, group
// and leader start time in the container's pid namespace), and a gone kernel's run
// directory goes with an exec of its cleanup. The kernel is reparented to the container's
// init when the start exec ends, so it lives while the container runs; killing an exec
// (or its attach connection) never touches it. Record.Where is the container; a
// container gone or stopped proves its kernels gone. Info.ID is the container, ':' and
// the kernel's run directory.
//
// # Warm pools
//
// A Pool (NewPool) keeps ready detached run-mode kernels of one description: each
// container made and started, its stub loaded and its socket bound, waiting for a
// session. A Transport whose Options.Pool is set takes one for a Start whose description
// resolves to the pool's (engine, image, user, interpreter, lock-down) and hands it out:
// the session's mounts and job output directory are cloned on this host (open_tree(2),
// nosuid and nodev, read-only ones read-only, before anything in the container can see
// them) and attached in the container's mount namespace from a thread that entered it
// (setns(2); a missing mount point is made, the read-only root made writable for that
// moment alone, before the kernel has run anything); then its start block gives it the
// token, the session's whole environment (as a cold start's: the engine's HOSTNAME,
// then the transport's entries) and working directory. Any other Start is cold, its
// Info.Pool PoolMiss. A pooled kernel is used once. Its container is labelled with the
// pool's instance (LabelPool) instead of a session (LabelSession): a sweep given that
// instance keeps it (SweepOptions.Pool), a later controller's sweep of the same owner
// removes it unless a record holds it. The pool needs CAP_SYS_ADMIN (root), a local
// engine and runc or crun.
package docker
