// Package wrapped runs kernels under a wrapper command an operator already trusts: the
// "wrapped" transport. The same stub runs in a container (`docker exec -i box`,
// `podman exec -i box`), a namespace sandbox (`bwrap ...`), or on another machine
// (`ssh -T host`): the kernel command is appended to the wrapper's argv prefix, and the
// wrapper carries the kernel's stdin and stdout, so frames and their limits do not
// change.
//
//	t := wrapped.New(wrapped.Options{
//		ArgvPrefix: []string{"docker", "exec", "-i", "box"},
//		Python:     "python3", // inside the sandbox, by name: never resolved on the host
//	})
//	k, err := t.Start(ctx, transports.Spec{
//		SessionID: "s1",
//		Dir:       "/work",                 // a sandbox path (pathmap.Map.Dir)
//		Env:       []string{"LANG=C.UTF-8"}, // already mapped (pathmap.Map.MapEnv)
//	})
//	if err != nil { ... }
//	defer k.Kill(context.WithoutCancel(ctx))
//	// k.Stdout() carries frames, the first being the hello; k.Stdin() takes frames.
//
// # Getting the stub into the sandbox
//
// Nothing is installed in the sandbox. The interpreter runs a small -c program (the start
// program every transport that starts over stdin shares, then the loader) that reads,
// from stdin and before the first frame, the start block and then the stub bundle in
// images' wire format (Bundle.BootstrapPayload: a length, then a zip), checks it against
// the bundle hash in its argv (Bundle.Hash), and imports the stub from memory; nothing is
// written in the sandbox. The loader does what images' own bootstrap program does without
// importing zipfile and hashlib, which cost about 25 ms of every start. Options.StubDir
// names a stub already unpacked in the sandbox (baked into an image) instead; then no
// bundle is sent, and a StubDir without the stub ends the kernel with status 3.
//
// # Environment
//
// A wrapped kernel's environment is not the host's. It is built by the one rule of every
// transport: PATH=DefaultPath, then the stub's defaults (MALLOC_MMAP_THRESHOLD_), then
// Spec.Env (the caller's: the kernel's own entries and the host variables the setting
// names, already mapped through the path map), each later entry of a key winning, then
// the transport's own entries, which nothing overrides: the bundle hash,
// KENNEL_KERNEL_EOF_GRACE when Options.EOFGrace is set, and KENNEL_KERNEL_OWNER=stdin. A
// Spec.Env naming one of those (transports.Reserved) is refused. Values travel in the
// start block over stdin, never in argv (ps shows argv to everyone on the machine that
// runs the wrapper): the kernel command is `env -i PATH=... <stub entries> python ...`,
// so the interpreter starts with an empty environment but for those fixed, non-secret
// entries, and the start program then replaces os.environ with the block's entries and
// changes to Spec.Dir. The wrapper process itself keeps the host's environment (docker
// and ssh need it).
//
// # Lifetime
//
// A wrapped kernel watches its stdin alone (KENNEL_KERNEL_OWNER=stdin): it leads its own
// process group and at stdin EOF ends its jobs' process groups and exits (a cell that
// holds it exits it after the EOF grace). Kill closes the kernel's stdin, waits
// StdinGrace, then signals the wrapper's process group with SIGTERM, waits TermGrace,
// and SIGKILLs it; the wrapper ends, so the stub sees its stdin close if it had not yet.
// The wrapper's exit is the only confirmation.
//
// The controller cannot reap what runs in the sandbox: its pids are not the host's
// (Info.HostPIDs is false; Info.PID is 0 and Info.ID is the wrapper's host pid). For a
// local kernel the controller's reaper ends every process a kernel left; for a wrapped
// kernel it relies on the stub's own shutdown at stdin EOF, which ends the jobs the stub
// started (job_run), and on the sandbox: a wrapper with its own pid namespace (bwrap
// --unshare-pid, a container) ends every process in it when the kernel ends, while a
// plain process wrapper (setsid) leaves a process a cell started by itself and detached
// from the kernel (subprocess.Popen with start_new_session, a double fork) running.
//
// # Detached kernels
//
// With Options.RunDir (a sandbox path) kernels are detached (docs/protocol.md, "Protocol
// 2"): each outlives its connection and its controller, and is reached again from its
// transports.Record by a later controller (Transport.Reattach). The controller cannot
// dial a socket in the sandbox, so a bridge does: a small program of the transports'
// start kit run under the wrapper beside the kernel, `python -I -S -c BRIDGE ACTION ...`,
// whose stdin and stdout are one connection to the kernel's socket.
//
//   - Start runs the kernel command with the bridge before the start program: the
//     command reads the start block (with KENNEL_KERNEL_RUN and the run directory
//     RunDir/<id>, which it makes 0700), forks the kernel, which reads the bundle and a
//     token from the same stdin, leads a session of its own and binds kernel.sock; once
//     the socket answers the command writes a ready line and relays its stdio to it. That
//     is the link's first connection (link.Client; frames through
//     transports/internal/linked); the controller writes nothing after the token before
//     the ready line.
//   - Every later connection (after a cut, or by Reattach) is an attach bridge run
//     under the wrapper: `attach RUN`. It exits with status 3 before any byte when no
//     kernel is there (no run directory or socket: the kernel ended; a socket nobody
//     listens on: it was killed), which proves the kernel gone (link.ErrGone); any other
//     failure is retried with the protocol's backoff.
//   - Killing a bridge, its wrapper or the wrapper's process group never touches the
//     kernel: it is in its own session, and the link reattaches through a fresh bridge.
//   - Kill sends shutdown over the link and waits StdinGrace, then runs a signal bridge
//     with TERM for the kernel's group and waits TermGrace, then with KILL (the kernel
//     stopped, everything below it and its group SIGKILLed; the kernel is its processes'
//     subreaper, so that is all of them), each checked inside the sandbox against the
//     hello's pid, group and leader start time, so a reused pid is never signalled. The
//     end is confirmed only by the link proving the kernel gone; a cleanup bridge then
//     removes its run directory. Wait reports Exit{} (the exit status is the sandbox's),
//     and after Detach an error matching link.ErrDetached: the kernel runs on, for
//     Options.KernelGrace with nothing attached.
//   - Info.ID is the kernel's run directory; Info.PID is 0.
//
// A wrapper keeps a detached kernel alive only if a process may outlive the command it
// ran: a plain process wrapper (setsid, env), `docker exec -i box` (the kernel is
// reparented to the container's init), bwrap without --unshare-pid (with or without
// --die-with-parent, which ends only the command). Each bridge must also see the same
// run directory (a path bound into every invocation, not a per-invocation tmpfs such as
// bwrap's --tmpfs /tmp) and the kernel's pid namespace (for the signals). So:
//
//   - A wrapper whose pid namespace ends with its first command cannot keep a kernel:
//     bwrap --unshare-pid --die-with-parent, `unshare --pid --fork --kill-child`, a
//     `docker run` per command. The kernel dies when the start command ends, at the end
//     of the first connection (a cut, Detach); its Wait then reports ErrKilledOutside
//     (the kernel left its socket: it was killed, not ended), and a Reattach finds no
//     kernel, its bridge saying the socket was left by a killed kernel.
//   - A wrapper that makes a pid namespace per command but keeps it while a process
//     lives (bwrap --unshare-pid alone) keeps the kernel and its connections, but no
//     signal bridge can reach it (exit status 4: the pid file the start command wrote
//     records another pid namespace); Kill then relies on the shutdown and the stub's
//     EOF grace, and says so in its error when ctx ends first.
package wrapped
