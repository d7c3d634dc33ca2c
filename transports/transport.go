// Package transports defines the one seam between the controller and the places a kernel
// can run: a local process, a wrapper command, a Docker container, a containerd task or a
// remote host over ssh.
//
// A Transport starts a kernel from a Spec and hands back a Kernel: a byte-stream pair with
// Kill and Wait, shaped like os/exec.Cmd after Start. The controller speaks the kernel
// protocol over those streams and never switches on the kind of transport; what differs
// between kinds (whose pids these are, how the stub reaches the sandbox) is said by the
// Kernel's Info and the Transport's Capabilities.
//
// Each kind lives in its own sub-package (transports/local, ...) and starts from the same
// kit: CheckSpec refuses a bad Spec (a *FieldError, errdefs.ErrInvalidArgument) before
// anything runs; one environment rule (Spec.Env over the transport's defaults, the
// transport's Reserved entries over everything); a Watch keeps each kernel's end (the
// staged kill, one reap, one result for every Wait). The conformance suite in
// transports/transporttest runs one table against every implementation.
package transports

import (
	"context"
	"io"
	"time"

	"github.com/containerd/errdefs"
)

// Spec says which kernel to start and how. The zero value of each optional field is
// documented; a Spec is read by Start and not kept.
type Spec struct {
	// SessionID names the session the kernel serves; transports use it in labels and
	// run-directory names. Required.
	SessionID string

	// Dir is the kernel's working directory, as a path inside the sandbox (already mapped
	// by the path map). Required.
	Dir string

	// Env holds the kernel's own environment entries ("KEY=VALUE"), already mapped. They
	// win over what the transport defaults (the host's environment for a local kernel,
	// PATH and the like elsewhere); the transport's own entries win over them, and an
	// entry naming one (Reserved) is refused.
	Env []string

	// Python is the interpreter inside the sandbox, a name or a path (see CheckPython).
	// Empty means "python3" resolved the way the transport documents (the local transport
	// resolves it once to an absolute path).
	Python string

	// Stderr, when non-nil, receives the kernel's stderr. Transports bound nothing here:
	// the caller passes a bounded writer. Nil discards it.
	Stderr io.Writer

	// JobOutDir, when set, is a host directory of the session's own in which the caller
	// makes its jobs' output files (see JobOutputs for the whole rule). A transport whose
	// kernel runs on this host but sees another file system may make the directory
	// visible to the kernel (Docker's run mode bind-mounts it) and then says where in
	// Info.JobOutDir. Empty: the caller has none.
	JobOutDir string
}

// Kernel is one started kernel process (or container, or remote process). It is single
// use: once Wait has returned, the Kernel is finished.
//
// Stdin and Stdout carry the newline-delimited JSON frames of docs/protocol.md. Closing
// Stdin is the stub's signal to shut down. The caller must keep reading Stdout until EOF;
// Wait does not drain it.
type Kernel interface {
	// Stdin is the kernel's standard input. Writes may block when the kernel does not read.
	Stdin() io.WriteCloser
	// Stdout is the kernel's standard output, the frame stream.
	Stdout() io.Reader
	// Info says what the controller may know about the kernel. It is fixed after Start.
	Info() Info
	// Kill ends the kernel and everything it started, in stages: close stdin, wait a grace,
	// signal TERM, wait a grace, signal KILL. It returns once the end is confirmed by the
	// kernel's exit (not by a signal call's return) or ctx ends. Kill is safe to call more
	// than once and concurrently with Wait.
	Kill(ctx context.Context) error
	// Wait blocks until the kernel has exited and its resources are released, and reports
	// how it ended. Later calls return the same result.
	Wait() (Exit, error)
}

// Ender is an optional interface of a Kernel whose end is known before Wait returns,
// Wait also waiting for the release of what it held (a container's removal, a pod's
// deletion): Ended is closed once the end has been seen, and Exit then returns the Exit
// Wait will. The controller reads an OOM end through it.
type Ender interface {
	Ended() <-chan struct{}
	Exit() Exit
}

// Info describes a running kernel.
type Info struct {
	// Transport is the kind's name ("local", "wrapped", "docker", "containerd", "ssh", "kubernetes").
	Transport string
	// PID is the process id of the kernel's process on the host, or 0 when the kernel's
	// pids are not the host's (HostPIDs is false).
	PID int
	// HostPIDs reports whether pids the kernel reports (in its hello and job frames) are
	// host pids the controller may signal. False for containers and remote hosts.
	HostPIDs bool
	// ID is a transport-specific handle (a container id, a remote run directory), or "".
	ID string
	// JobOutDir is where the kernel sees Spec.JobOutDir, a path in the sandbox: a file the
	// caller makes there is one the kernel can open at JobOutDir/<name>. Empty when the
	// kernel cannot (no Spec.JobOutDir, or another host's file system: a remote engine,
	// a VM).
	JobOutDir string
	// Pool is "hit" for a kernel a warm pool handed out, "miss" for one started cold
	// beside a pool that had none ready of its description, "" where no pool applies.
	Pool string
}

// Exit is how a kernel ended.
type Exit struct {
	// Code is the exit code, or -1 when the kernel was ended by a signal.
	Code int
	// Signal is the signal that ended it, or 0.
	Signal int
	// OOM reports that the sandbox's memory limit ended the kernel.
	OOM bool
	// Killed reports that Kill ended it (as opposed to the kernel exiting by itself).
	Killed bool
}

// Transport starts kernels of one kind.
type Transport interface {
	// Name is the kind's name, as in Info.Transport.
	Name() string
	// Capabilities says what this transport supports.
	Capabilities() Capabilities
	// Start launches a kernel. The kernel outlives ctx: ctx bounds only the start. On
	// error nothing is left running.
	Start(ctx context.Context, spec Spec) (Kernel, error)
}

// Capabilities lists optional abilities a transport may have. The conformance suite skips
// the cases a transport does not claim.
type Capabilities struct {
	// HostEnv: the kernel sees the host's environment plus Spec.Env (local transport).
	HostEnv bool
	// HostPIDs: Info.PID and the kernel's reported pids are host pids.
	HostPIDs bool
	// SameFS: the kernel sees the host file system at the host's paths (no path map needed).
	SameFS bool
	// Detached: kernels outlive the controller (docs/protocol.md, "Protocol 2"): each is
	// reached over a link and watches no owner, neither a pid nor stdin.
	Detached bool
}

// Grace is the default time Kill waits after closing stdin, and again after TERM.
const Grace = 2 * time.Second

// ResolveGrace reads a grace option the way every transport's Options document it: zero
// means Grace, a negative duration means no wait (0), any other is itself.
func ResolveGrace(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return Grace
	case d < 0:
		return 0
	}
	return d
}

// ErrUnavailable reports that a transport cannot start kernels here (no interpreter, no
// engine, no image, no host to reach): errdefs.ErrUnavailable, the class every package
// uses for it. Errors wrap it with the reason and the fix.
var ErrUnavailable = errdefs.ErrUnavailable
