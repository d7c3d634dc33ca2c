package containerd

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
)

// Defaults of the lock-down and of the daemon reached, each changed by a field of Options.
const (
	// Namespace is the containerd namespace kennel's containers, tasks, snapshots, leases
	// and images live in.
	Namespace = "kennel"
	// DefaultAddress is the socket of the machine's containerd (not Docker's own).
	DefaultAddress = "/run/containerd/containerd.sock"
	// DefaultRuntime is the runtime shim: runc.
	DefaultRuntime = "io.containerd.runc.v2"
	// DefaultSnapshotter is the snapshotter the kernel image is unpacked into.
	DefaultSnapshotter = "overlayfs"
	// DefaultMemory is the memory limit (and memory+swap: no swap), 1 GiB.
	DefaultMemory = 1 << 30
	// DefaultCPUQuota is the CFS quota per DefaultCPUPeriod: one CPU.
	DefaultCPUQuota = 100_000
	// DefaultCPUPeriod is the CFS period in microseconds.
	DefaultCPUPeriod = 100_000
	// DefaultPids is the limit on processes and threads in the container.
	DefaultPids = 256
	// DefaultTmpfsSize is the size of the tmpfs at /tmp, in bytes (it counts toward the
	// memory limit).
	DefaultTmpfsSize = 256 << 20
	// FallbackUser is the kernel's uid:gid when the operator is root and the workspace is
	// root's too: nobody's.
	FallbackUser = docker.FallbackUser
)

// Options configure a Transport. Every zero value is the locked-down default, documented on
// its field; an operator loosens one setting at a time.
type Options struct {
	// Image is the containerd image the kernels run. Empty means Ref of the embedded stub,
	// which ImportFromDocker (`kennel image build --containerd`) makes. Start never pulls:
	// a missing image is an error naming that command, an image whose bundle label is not
	// the embedded stub's is stale.
	Image string

	// Runtime is the runtime: a containerd shim ("io.containerd.runsc.v1", gVisor's own
	// shim, where installed and where it may lower its oom_score_adj: it needs
	// CAP_SYS_RESOURCE), or else an OCI runtime binary the runc shim runs in runc's place
	// ("runsc" for gVisor under the runc shim, as Docker's `--runtime runsc`; a name on
	// the daemon's PATH or an absolute path). Empty means DefaultRuntime (runc).
	Runtime string

	// Snapshotter unpacks the image and holds each kernel's root file system. Empty means
	// DefaultSnapshotter.
	Snapshotter string

	// Mounts are the path map's mounts: each becomes a bind mount of Host at Sandbox,
	// read-only where the mount is. Empty binds nothing (the kernel sees only the image).
	Mounts []pathmap.Mount

	// User is the kernel's numeric "uid:gid". Empty means the operator's own uid:gid (the
	// Docker transport's rule, docker.DefaultUser): never root by default. A user name is
	// refused: resolving it would read the image's root file system on the client.
	User string

	// Memory is the memory limit in bytes (memory+swap the same: no swap). Zero means
	// DefaultMemory; negative means no limit.
	Memory int64
	// CPUQuota is the CFS quota in microseconds per DefaultCPUPeriod. Zero means
	// DefaultCPUQuota (one CPU); negative means no limit.
	CPUQuota int64
	// Pids is the limit on processes and threads. Zero means DefaultPids; negative means
	// no limit.
	Pids int64
	// TmpfsSize is the size of the tmpfs at /tmp in bytes. Zero means DefaultTmpfsSize.
	TmpfsSize int64

	// Controller is the identity of the controller that owns the containers, written into
	// their labels (and their snapshots' and leases') and used by Sweep. The zero value
	// means docker.Self().
	Controller docker.Controller

	// FIFODir is the host directory under which each kernel's stdio FIFOs are made (one
	// directory per container, removed with it). Empty means DefaultFIFODir().
	FIFODir string

	// EOFGrace is how long a cell holding the kernel may run after its stdin closed before
	// the stub exits anyway. Zero leaves the stub's default (30 s).
	EOFGrace time.Duration
	// StdinGrace is how long Kill waits after closing stdin before SIGTERM. Zero means
	// transports.Grace; negative means no wait.
	StdinGrace time.Duration
	// StopGrace is how long Kill waits after SIGTERM before SIGKILL. Zero means
	// transports.Grace; negative means no wait.
	StopGrace time.Duration

	// RunDir, when set, makes kernels detached (docs/protocol.md, "Protocol 2"): each gets
	// a run directory RunDir/<id> (0700, the kernel's uid:gid; the controller must be
	// allowed to chown), bind-mounted at ContainerRunRoot/<id>, and the controller dials
	// its kernel.sock across the container boundary. The task outlives the controller
	// (containerd's shim holds it) for KernelGrace with nothing attached; a later
	// controller reattaches from its record (Transport.Reattach).
	RunDir string
	// KernelGrace is how long a detached kernel lives with nothing attached. Zero means
	// DefaultKernelGrace.
	KernelGrace time.Duration

	// Pool, when set, is a warm pool (NewPool) a detached kernel is taken from when the
	// pool's kernels have its description: its Info.Pool is then transports.PoolHit, and
	// transports.PoolMiss for one started cold beside the pool. Nil starts every kernel
	// cold.
	Pool *Pool
}

// DefaultFIFODir is where kernels' stdio FIFOs live when Options.FIFODir is empty:
// kennel-containerd under the system's temporary directory.
func DefaultFIFODir() string { return filepath.Join(os.TempDir(), "kennel-containerd") }

// UserFor returns the kernel's uid and gid for a start whose working directory is dir (a
// sandbox path): Options.User, or the Docker transport's default (the operator's, else the
// owner of the working directory's host directory, else FallbackUser).
func (o Options) UserFor(dir string) (uid, gid uint32, err error) {
	u := o.User
	if u == "" {
		u = docker.DefaultUserFor(o.Mounts, dir)
	}
	return parseUser(u)
}

// parseUser reads a numeric "uid:gid".
func parseUser(u string) (uint32, uint32, error) {
	us, gs, ok := strings.Cut(u, ":")
	uid, err1 := strconv.ParseUint(us, 10, 32)
	gid, err2 := strconv.ParseUint(gs, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, &transports.FieldError{Field: "Options.User", Reason: fmt.Sprintf("%q is not a numeric uid:gid", u)}
	}
	return uint32(uid), uint32(gid), nil
}

// check refuses options that cannot work, before anything runs.
func (o Options) check() error {
	if err := CheckRuntime(o.Runtime); err != nil {
		return &transports.FieldError{Field: "Options.Runtime", Reason: err.Error()}
	}
	for i, m := range o.Mounts {
		field := fmt.Sprintf("Options.Mounts[%d]", i)
		if !filepath.IsAbs(m.Sandbox) || !filepath.IsAbs(m.Host) {
			return &transports.FieldError{Field: field, Reason: fmt.Sprintf("%q at %q: paths must be absolute", m.Host, m.Sandbox)}
		}
		if strings.ContainsAny(m.Host+m.Sandbox, "\x00") {
			return &transports.FieldError{Field: field, Reason: fmt.Sprintf("%q at %q: a NUL in a path", m.Host, m.Sandbox)}
		}
	}
	if o.User != "" {
		if _, _, err := parseUser(o.User); err != nil {
			return err
		}
	}
	if strings.ContainsAny(o.Runtime, " \t\r\n\x00") {
		return &transports.FieldError{Field: "Options.Runtime", Reason: fmt.Sprintf("%q is not a shim name or an OCI runtime binary", o.Runtime)}
	}
	if o.FIFODir != "" {
		if err := transports.CheckPath("Options.FIFODir", o.FIFODir); err != nil {
			return err
		}
	}
	return nil
}

// runtimeName is what a runtime may be: a shim name or a bare binary name.
var runtimeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$`)

// CheckRuntime refuses a runtime that is neither empty, a shim name, nor a bare binary
// name: never a path, so a session description cannot have containerd run a binary of its
// choosing as the OCI runtime (a name is found on containerd's own PATH, which the
// operator sets).
func CheckRuntime(r string) error {
	if r == "" || runtimeName.MatchString(r) {
		return nil
	}
	return fmt.Errorf("runtime %q: want a shim name (io.containerd.runsc.v1) or an OCI runtime's bare name on containerd's PATH (runsc), never a path", r)
}
