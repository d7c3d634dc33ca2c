package ssh

import (
	"cmp"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
)

// Name is the ssh transport's name, as in Info.Transport.
const Name = "ssh"

//go:embed control.py
var controlSource string

// readRun begins the scripts of a kernel's run (the kernel, its relays): the interpreter's
// path on stdin's first line, the run id on the second, checked and exported as the
// run's marker.
const readRun = `IFS= read -r py || exit 2
IFS= read -r run || exit 2
case "$run" in ''|.*|*[!A-Za-z0-9._-]*) exit 2 ;; esac
export KENNEL_REMOTE_RUN="$run"
`

// kernelScript is the kernel's fixed command: readRun, then the start block
// (kernelstart.Block), then the frames. The run id is exported before the exec, so the
// kernel's own environment (its /proc/<pid>/environ, which later changes to os.environ
// do not touch) carries the run's marker from its first instruction on, as everything
// it starts does.
var kernelScript = readRun + `export MALLOC_MMAP_THRESHOLD_=33554432
exec "$py" -I -S -c ` + shQuote(kernelstart.Program(kernelstart.BootProgram()))

// controlScript signals or sweeps a kernel (control.py): the interpreter's path on
// stdin's first line, then the run id and the action.
var controlScript = `IFS= read -r py || exit 2
exec "$py" -I -S -c ` + shQuote(images.PythonProgram(controlSource))

// keptFromLogin are the variables of the login shell a remote kernel keeps (before
// Spec.Env and the transport's entries).
var keptFromLogin = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TZ"}

// Options configures a Transport. Every zero value but Target is documented and usable.
type Options struct {
	// Target is the host: "[user@]host[:port]", resolved through the ssh config.
	Target string
	// EOFGrace is how long a cell holding the kernel may run after its stdin closed before
	// the stub exits anyway (KENNEL_KERNEL_EOF_GRACE). Zero leaves the stub's default.
	EOFGrace time.Duration
	// StdinGrace is how long Kill waits for the kernel's exit after closing its stdin;
	// TermGrace how long after the remote SIGTERM before the remote SIGKILL. Zero means
	// transports.Grace; negative means no wait.
	StdinGrace time.Duration
	TermGrace  time.Duration
	// Detached makes kernels detached (docs/protocol.md, "Protocol 2"): each outlives its
	// ssh connection and its controller, and is reached over kernel.sock in its run
	// directory through the connection's streamlocal forwarding (the host's sshd must
	// allow it: AllowStreamLocalForwarding, on by default).
	Detached bool
	// KernelGrace is how long a detached kernel lives with nothing attached (zero:
	// DefaultKernelGrace).
	KernelGrace time.Duration
	// Heartbeat is how often the controller writes on an idle link (zero:
	// link.DefaultHeartbeat): a kernel that hears nothing for three of them (its host
	// partitioned from the controller, the connection dead without an end) drops the
	// connection and starts its grace, so a controller that never comes back leaves
	// nothing running there.
	Heartbeat time.Duration
}

// Transport starts kernels on one remote host over the Hosts' shared connection. It is
// safe for concurrent use.
type Transport struct {
	hosts *Hosts
	opts  Options
}

// New returns a Transport for opts.Target. It connects nowhere until Start.
func New(hosts *Hosts, opts Options) *Transport {
	return &Transport{hosts: hosts, opts: opts}
}

// Name returns "ssh".
func (t *Transport) Name() string { return Name }

// Capabilities reports only whether kernels are detached: a remote kernel has its own
// environment, pids and files.
func (t *Transport) Capabilities() transports.Capabilities {
	return transports.Capabilities{Detached: t.opts.Detached}
}

// Start probes the host (or reuses a cached probe), stages the stub bundle if it is not
// there, and starts the kernel in a new session on the shared connection; it returns
// once the remote command runs, and the hello is the first frame on Stdout.
//
// The command is fixed (see the package doc); the interpreter, the run id, Spec.Dir and
// the environment travel on stdin. Spec.Python, when set, is a remote name or path; else
// the probe's python3 (its absolute path). Spec.Dir must be an absolute remote path: a
// missing one ends the kernel with exit status 4 before any frame. The kernel's
// environment is the login shell's PATH, HOME, USER, LOGNAME, SHELL, LANG and TZ, the
// stub's defaults, Spec.Env, then the transport's own entries (the bundle hash,
// KENNEL_KERNEL_EOF_GRACE when EOFGrace is set, KENNEL_KERNEL_OWNER=stdin,
// KENNEL_REMOTE_RUN), a later entry winning and the transport's never given in Spec.Env
// (kernelstart.Env). A host that is not ready fails with ErrNeedsAuth, ErrUnreachable or
// ErrUnsupported (all transports.ErrUnavailable); a Spec refused before anything ran is a
// *transports.FieldError (errdefs.ErrInvalidArgument).
func (t *Transport) Start(ctx context.Context, spec transports.Spec) (_ transports.Kernel, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("start ssh kernel %q: %w", spec.SessionID, err)
		}
	}()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	if err := transports.CheckSpec(spec); err != nil {
		return nil, err
	}
	b, err := images.Stub()
	if err != nil {
		return nil, err
	}
	_, p, err := t.hosts.stage(ctx, t.opts.Target, b)
	if err != nil {
		return nil, err
	}
	target, err := t.hosts.Resolve(t.opts.Target)
	if err != nil {
		return nil, err
	}
	hc, err := t.hosts.connFor(ctx, target)
	if err != nil {
		return nil, err
	}
	python := cmp.Or(spec.Python, p.PythonPath)
	runID := runID(spec.SessionID)
	if t.opts.Detached {
		runID = runID[len(runID)-16:] // sshd connects to the socket by its whole path
	}
	base := path.Join(p.Home, ".kennel-remote")
	runDir := path.Join(base, "run", runID)
	env := kernelstart.Env{Stub: images.KernelEnv(b), EOFGrace: t.opts.EOFGrace, Run: runID}
	if t.opts.Detached {
		if sock := path.Join(runDir, "kernel.sock"); len(sock) >= maxSunPath {
			return nil, fmt.Errorf("the detached kernel's socket %s is over the %d-byte socket path limit (the remote home %s is too deep): %w", sock, maxSunPath-1, p.Home, ErrUnsupported)
		}
		env.Detached = runDir
	}
	block, err := kernelstart.Block{
		Dir:  spec.Dir,
		Keep: keptFromLogin,
		Run:  runDir,
		Stub: path.Join(base, b.Hash()),
		Env:  env.Build(spec.Env),
	}.Encode()
	if err != nil {
		return nil, err
	}
	preamble := append([]byte(python+"\n"+runID+"\n"), block...)
	if t.opts.Detached {
		return t.startDetached(ctx, hc, target, p.PythonPath, runID, runDir, preamble)
	}
	return startKernel(ctx, hc, kernelConfig{
		hosts:      t.hosts,
		target:     target,
		python:     p.PythonPath,
		runID:      runID,
		runDir:     runDir,
		id:         target.String() + ":" + runDir,
		preamble:   preamble,
		stderr:     spec.Stderr,
		stdinGrace: transports.ResolveGrace(t.opts.StdinGrace),
		termGrace:  transports.ResolveGrace(t.opts.TermGrace),
	})
}

// maxSunPath is the size of sun_path on Linux, its NUL included.
const maxSunPath = 108

// runID is a fresh run directory name: the session id's first 40 bytes, each but
// [A-Za-z0-9_-] made '_', then 8 random bytes in hex.
func runID(session string) string {
	safe := []byte(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, session))
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	return string(safe[:min(len(safe), 40)]) + "-" + hex.EncodeToString(rnd[:])
}

// control runs the control command for a run on the host.
func (h *Hosts) control(ctx context.Context, target Target, python, runID, action string) (string, error) {
	c, err := h.clientFor(ctx, target)
	if err != nil {
		return "", err
	}
	out, err := runRemote(ctx, c, action+" kernel "+runID+" on "+target.String(), controlScript,
		strings.NewReader(python+"\n"+runID+"\n"+action+"\n"), 4096)
	return strings.TrimSpace(string(out)), err
}
