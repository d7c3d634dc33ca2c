// Package local runs kernels as child processes of the controller on the host: the
// "local" transport.
//
// Each kernel is the stub (package images) run by the resolved Python interpreter, in its
// own process group, in Spec.Dir, with the host's environment plus Spec.Env. It runs under
// a reaper (internal/reaper): the controller's binary re-executed as a child subreaper,
// which hands the kernel the frame pipes as they are and makes sure that nothing the kernel
// or its cells start outlives the kernel, the Kill, or the controller itself. A binary that
// uses this package must therefore call reaper.Main first in main (cmd/kennel does; so does
// TestMain of every test package that starts local kernels).
//
//	t := local.New(local.Options{})
//	k, err := t.Start(ctx, transports.Spec{SessionID: "s1", Dir: "/home/me/project"})
//	if err != nil { ... } // errors.Is(err, transports.ErrUnavailable): no usable python
//	defer k.Kill(context.WithoutCancel(ctx))
//	// k.Stdout() carries frames, the first being the hello; k.Stdin() takes frames.
//
// With Options.RunDir set, kernels are detached instead (docs/protocol.md, "Protocol 2"):
// the stub runs in its own session, is its own subreaper, serves kernel.sock in a run
// directory of its own under RunDir (token handed over fd 0, never argv or the
// environment), and outlives its controller; Start attaches to it through a link.Client
// (package link) and returns once the socket answered. The returned Kernel reads like any
// other; it also implements Detacher: Detach lets the kernel run on alone for its grace
// (Options.KernelGrace, sent in every attach), and Record is what reattaching takes. Kill
// sends shutdown over the link, then SIGTERMs the kernel's group, then stops the kernel
// and SIGKILLs everything below it, its jobs' groups and its group.
//
// The local transport is a lifetime guard, not an isolation boundary: the kernel runs as
// the controller's user and sees the host's files, environment and pids.
package local
