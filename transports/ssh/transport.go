package ssh

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports"
)

// Name is the ssh transport's name, as in Info.Transport.
const Name = "ssh"

// MaxStartBlock is the largest start block (working directory and environment) a remote
// kernel accepts, in bytes.
const MaxStartBlock = 1 << 20

// ErrInvalidSpec reports a Spec the transport refuses before starting anything.
var ErrInvalidSpec = errors.New("invalid kernel spec")

//go:embed launch.py
var launchSource string

//go:embed control.py
var controlSource string

// kernelScript is the kernel's fixed command: the interpreter's path on stdin's first
// line, the run id on the second, then the start block (launch.py), then the frames.
// The run id is exported before the exec, so the kernel's own environment (its
// /proc/<pid>/environ, which later changes to os.environ do not touch) carries the
// run's marker from its first instruction on, as everything it starts does.
var kernelScript = `IFS= read -r py || exit 2
IFS= read -r run || exit 2
case "$run" in ''|.*|*[!A-Za-z0-9._-]*) exit 2 ;; esac
export KENNEL_REMOTE_RUN="$run"
export MALLOC_MMAP_THRESHOLD_=33554432
exec "$py" -I -S -c ` + shQuote(strings.ReplaceAll(images.PythonProgram(launchSource), "MAX_START_BLOCK", strconv.Itoa(MaxStartBlock))+
	"\n"+bootProgram())

// controlScript signals or sweeps a kernel (control.py): the interpreter's path on
// stdin's first line, then the run id and the action.
var controlScript = `IFS= read -r py || exit 2
exec "$py" -I -S -c ` + shQuote(images.PythonProgram(controlSource))

// bootProgram is images' -c program that runs a stub unpacked in sys.argv[1].
func bootProgram() string {
	argv := images.KernelArgv("python3", "/")
	return argv[len(argv)-2]
}

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

// Capabilities reports none: a remote kernel has its own environment, pids and files.
func (t *Transport) Capabilities() transports.Capabilities { return transports.Capabilities{} }

// Start probes the host (or reuses a cached probe), stages the stub bundle if it is not
// there, and starts the kernel in a new session on the shared connection; it returns
// once the remote command runs, and the hello is the first frame on Stdout.
//
// The command is fixed (see the package doc); the interpreter, the run id, Spec.Dir and
// the environment travel on stdin. Spec.Python, when set, is a remote name or path; else
// the probe's python3 (its absolute path). Spec.Dir must be an absolute remote path: a
// missing one ends the kernel with exit status 4 before any frame. A host that is not
// ready fails with ErrNeedsAuth, ErrUnreachable or ErrUnsupported (all
// transports.ErrUnavailable); a Spec refused before anything ran matches ErrInvalidSpec.
func (t *Transport) Start(ctx context.Context, spec transports.Spec) (transports.Kernel, error) {
	if err := context.Cause(ctx); err != nil {
		return nil, fmt.Errorf("start ssh kernel %q: %w", spec.SessionID, err)
	}
	if err := checkSpec(spec); err != nil {
		return nil, fmt.Errorf("start ssh kernel %q: %w", spec.SessionID, err)
	}
	b, err := images.Stub()
	if err != nil {
		return nil, fmt.Errorf("start ssh kernel %q: %w", spec.SessionID, err)
	}
	_, p, err := t.hosts.stage(ctx, t.opts.Target, b)
	if err != nil {
		return nil, fmt.Errorf("start ssh kernel %q: %w", spec.SessionID, err)
	}
	target, err := t.hosts.Resolve(t.opts.Target)
	if err != nil {
		return nil, fmt.Errorf("start ssh kernel %q: %w", spec.SessionID, err)
	}
	hc, err := t.hosts.connFor(ctx, target)
	if err != nil {
		return nil, fmt.Errorf("start ssh kernel %q: %w", spec.SessionID, err)
	}
	python := spec.Python
	if python == "" {
		python = p.PythonPath
	}
	runID := runID(spec.SessionID)
	env := append(images.KernelEnv(b), spec.Env...)
	if t.opts.EOFGrace > 0 {
		env = append(env, images.EnvEOFGrace+"="+strconv.FormatFloat(t.opts.EOFGrace.Seconds(), 'f', -1, 64))
	}
	block, err := encodeStart(b.Hash(), runID, spec.Dir, env)
	if err != nil {
		return nil, fmt.Errorf("start ssh kernel %q: %w: %w", spec.SessionID, err, ErrInvalidSpec)
	}
	preamble := append([]byte(python+"\n"+runID+"\n"), block...)
	k, err := startKernel(ctx, hc, kernelConfig{
		hosts:      t.hosts,
		target:     target,
		python:     p.PythonPath,
		runID:      runID,
		id:         target.String() + ":" + path.Join(p.Home, ".kennel-remote", "run", runID),
		preamble:   preamble,
		stderr:     spec.Stderr,
		stdinGrace: transports.ResolveGrace(t.opts.StdinGrace),
		termGrace:  transports.ResolveGrace(t.opts.TermGrace),
	})
	if err != nil {
		return nil, fmt.Errorf("start ssh kernel %q: %w", spec.SessionID, err)
	}
	return k, nil
}

func checkSpec(spec transports.Spec) error {
	if spec.SessionID == "" {
		return fmt.Errorf("no session id: %w", ErrInvalidSpec)
	}
	if !path.IsAbs(spec.Dir) || strings.IndexByte(spec.Dir, 0) >= 0 {
		return fmt.Errorf("dir %q is not an absolute remote path: %w", spec.Dir, ErrInvalidSpec)
	}
	if strings.ContainsAny(spec.Python, "\x00\n") || strings.HasPrefix(spec.Python, "-") {
		return fmt.Errorf("python %q cannot be run by name or path: %w", spec.Python, ErrInvalidSpec)
	}
	return nil
}

// runID is a fresh run directory name: the session id's safe characters and 8 random
// bytes.
func runID(session string) string {
	var b strings.Builder
	for _, r := range session {
		if b.Len() >= 40 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	return strings.TrimLeft(b.String()+"-"+hex.EncodeToString(rnd[:]), ".")
}

// errBadBlock reports a start block that cannot be encoded.
var errBadBlock = errors.New("bad start block")

// encodeStart returns the start block launch.py reads: the 4-byte big-endian length,
// then the magic, bundle hash, run id, dir and each env entry, each ended by NUL.
func encodeStart(bundle, runID, dir string, env []string) ([]byte, error) {
	if strings.IndexByte(dir, 0) >= 0 || dir == "" {
		return nil, fmt.Errorf("dir %q: %w", dir, errBadBlock)
	}
	fields := []string{"kennel-ssh/1", bundle, runID, dir}
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
			return nil, fmt.Errorf("env entry %q is not KEY=VALUE: %w", kv, errBadBlock)
		}
		fields = append(fields, kv)
	}
	n := 0
	for _, f := range fields {
		n += len(f) + 1
	}
	if n > MaxStartBlock {
		return nil, fmt.Errorf("start block of %d bytes over %d: %w", n, MaxStartBlock, errBadBlock)
	}
	out := binary.BigEndian.AppendUint32(make([]byte, 0, 4+n), uint32(n))
	for _, f := range fields {
		out = append(append(out, f...), 0)
	}
	return out, nil
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
