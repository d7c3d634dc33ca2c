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
package wrapped
