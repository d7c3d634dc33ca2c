// Package kernelstart is the start kit the transports share: the one builder of a
// kernel's environment (Env); the one start block (Block) with the one Python program
// that reads it (Program), for the transports that send a kernel's directory and
// environment over stdin (wrapped, ssh) rather than in an argv that ps shows everyone;
// the reader of a kernel's output pipe (PipeReader); and the cuttable reader of an output
// stream the transport does not own as a pipe (CutReader: containerd's FIFO, an exec's
// stdout); and a kernel's stdin that closes once (Stdin).
//
//	env := kernelstart.Env{Base: []string{"PATH=" + kernelstart.DefaultPath}, Stub: images.KernelEnv(b)}
//	block, err := kernelstart.Block{Dir: spec.Dir, Env: env.Build(spec.Env)}.Encode()
//	argv := []string{python, "-I", "-S", "-c", kernelstart.Program(images.BootstrapProgram()), b.Hash()}
//	// stdin: block, then what the next program reads (the bundle), then the frames.
//
// For a detached kernel behind a wrapper or in a container's exec (the wrapped
// transport, Docker exec mode) the kit has the bridge (bridge.py): BridgeArgv, the
// program beside the kernel whose stdio is one connection to its socket (attach), which
// signals its group (signal) and removes its run directory (cleanup); DetachedProgram,
// the start program whose command relays to the kernel it forked; and Bridged and
// BridgedKernel, the detached kernel of such a transport over any Runner (how it runs a
// command in its sandbox).
//
// The spec check and the kill bookkeeping are the transports package's own
// (transports.CheckSpec, transports.Watch).
package kernelstart
