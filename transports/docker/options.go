package docker

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/transports"
)

// Defaults of the lock-down, each loosened by a field of Options.
const (
	// DefaultMemory is the container's memory limit (and memory+swap: no swap), 1 GiB.
	DefaultMemory = 1 << 30
	// DefaultNanoCPUs is the CPU limit in billionths of a CPU: one CPU.
	DefaultNanoCPUs = 1_000_000_000
	// DefaultPids is the limit on processes and threads in the container.
	DefaultPids = 256
	// DefaultTmpfsSize is the size of the tmpfs at /tmp, in bytes (it counts toward the
	// memory limit).
	DefaultTmpfsSize = 256 << 20
	// DefaultNetwork is the network mode: none.
	DefaultNetwork = "none"
	// FallbackUser is the kernel's uid:gid when the operator is root and the workspace
	// is root's too: nobody's.
	FallbackUser = "65534:65534"
)

// DefaultKernelGrace is how long a detached kernel lives with nothing attached when
// Options.KernelGrace is zero.
const DefaultKernelGrace = time.Hour

// Options configure a Transport. Every zero value is the locked-down default, documented
// on its field; an operator loosens one setting at a time.
type Options struct {
	// Image is the kernel image (run mode). Empty means kernelimage.KernelRef of the
	// embedded stub, which `kennel image build` makes. Start never pulls or builds: a
	// missing image is an error naming `kennel image build`, an image whose bundle
	// label is not the embedded stub's is stale.
	Image string

	// Container, when set, selects exec mode: each kernel runs as an exec in this
	// existing, operator-managed container (the `docker exec -i box` case), with the
	// stub sent over stdin (images.Bundle.BootstrapArgv). The container's own limits
	// apply; the lock-down fields below and Mounts are not used, and the path map must
	// describe the container's mounts.
	Container string

	// Mounts are the path map's mounts: each becomes a bind mount of Host at Sandbox,
	// read-only where the mount is. Empty binds nothing (the kernel sees only the image).
	Mounts []pathmap.Mount

	// User is the kernel's "uid:gid" (or a user name of the image). Empty means the
	// operator's own uid:gid, so files the kernel writes into a bind mount belong to the
	// operator on the host; when the operator is root (uid 0), the owner of the host
	// directory mounted at the kernel's working directory instead, or FallbackUser when
	// that is root too: a kernel never runs as root by default. "0:0" runs it as root
	// (with no capabilities all the same).
	User string

	// Network is the network mode: "none" (default), "bridge", or a named network.
	Network string

	// Memory is the memory limit in bytes (memory+swap is the same: no swap). Zero
	// means DefaultMemory; negative means no limit.
	Memory int64
	// NanoCPUs is the CPU limit in billionths of a CPU. Zero means DefaultNanoCPUs;
	// negative means no limit.
	NanoCPUs int64
	// Pids is the limit on processes and threads. Zero means DefaultPids; negative
	// means no limit.
	Pids int64
	// TmpfsSize is the size of the tmpfs at /tmp in bytes. Zero means DefaultTmpfsSize.
	TmpfsSize int64

	// Runtime is the OCI runtime name ("runsc" for gVisor where installed). Empty means
	// the engine's default.
	Runtime string

	// CapAdd lists capabilities given back after all are dropped. Empty keeps none.
	CapAdd []string
	// AllowNewPrivileges leaves out no-new-privileges (setuid binaries work again).
	AllowNewPrivileges bool
	// WritableRootfs leaves the root file system writable (default read-only, with a
	// tmpfs at /tmp).
	WritableRootfs bool
	// NoInit runs the kernel as the container's pid 1 instead of under the engine's
	// init process, which reaps zombies and forwards signals.
	NoInit bool
	// SecurityOpt adds engine security options (e.g. "seccomp=/path/profile.json").
	// Empty keeps Docker's default seccomp profile.
	SecurityOpt []string

	// Controller is the identity of the controller that owns the containers, written
	// into their labels and used by Sweep. The zero value means Self().
	Controller Controller

	// EOFGrace is how long a cell holding the kernel may run after its stdin closed
	// before the stub exits anyway. Zero leaves the stub's default (30 s).
	EOFGrace time.Duration
	// StdinGrace is how long Kill waits after closing stdin before it stops the
	// container. Zero means transports.Grace; negative means no wait.
	StdinGrace time.Duration
	// StopGrace is the stop timeout: how long after SIGTERM the engine waits before
	// SIGKILL. Zero means transports.Grace. Whole seconds (rounded up); negative means 0.
	StopGrace time.Duration

	// DetachedOwner, when set, labels the containers of detached kernels
	// (LabelDetachedOwner) with the controller state they belong to, so that a sweep of
	// that state (SweepOptions.Owner) removes those no record of it holds and never
	// another state's. The daemon sets it from its state directory.
	DetachedOwner string
	// RunDir, when set, makes kernels detached (docs/protocol.md, "Protocol 2"), an
	// absolute path. In run mode each kernel gets a run directory under RunDir (on this
	// host), bind-mounted into its container at ContainerRunRoot/<id> and given to the
	// kernel's user, whose kernel.sock the controller dials across the container
	// boundary; the container outlives the controller (removed by the engine once the
	// kernel exits) and is not a dead controller's to sweep. The kernel's User must be
	// numeric and the controller able to chown (root). In exec mode RunDir is a path
	// inside Options.Container, under which the kernel's start exec makes its run
	// directory (as Options.User; RunDir itself 0700 when it is made), and the kernel is
	// reached through bridges, execs beside it (see the package doc, "Detached
	// kernels"). Empty keeps kernels on the attached stream.
	RunDir string
	// KernelGrace is how long a detached kernel lives with nothing attached (zero:
	// DefaultKernelGrace).
	KernelGrace time.Duration

	// Pool, when set, is a warm pool (NewPool) a detached run-mode kernel is taken from
	// when the pool's kernels have its description (engine, image, user, interpreter,
	// lock-down): its Info.Pool is then PoolHit, and PoolMiss for one started cold
	// beside the pool. Nil starts every kernel cold.
	Pool *Pool
}

// UserFor returns the kernel's user for a start whose working directory is dir (a
// sandbox path): User, or its documented default. The session assembly gives fs.write's
// files to this user (when numeric), as the kernel's own writes belong to it.
func (o Options) UserFor(dir string) string {
	if o.User != "" {
		return o.User
	}
	return DefaultUserFor(o.Mounts, dir)
}

// DefaultUserFor is DefaultUser for a kernel of this process's user whose working
// directory dir (a sandbox path) is on one of mounts: the owner of dir's host directory
// takes root's place. The containerd transport's default too.
func DefaultUserFor(mounts []pathmap.Mount, dir string) string {
	return DefaultUser(os.Getuid(), os.Getgid(), func() (int, int, bool) {
		host, ok := hostDirOf(mounts, dir)
		if !ok {
			return 0, 0, false
		}
		fi, err := os.Stat(host)
		if err != nil {
			return 0, 0, false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return 0, 0, false
		}
		return int(st.Uid), int(st.Gid), true
	})
}

// DefaultUser is the rule of Options.User's default: the operator's uid:gid unless it is
// root; then the owner of the working directory's host directory (owner, when it reports
// ok) unless that is root too; then FallbackUser. It never returns a root uid.
func DefaultUser(uid, gid int, owner func() (uid, gid int, ok bool)) string {
	if uid != 0 {
		return strconv.Itoa(uid) + ":" + strconv.Itoa(gid)
	}
	if owner != nil {
		if u, g, ok := owner(); ok && u != 0 {
			return strconv.Itoa(u) + ":" + strconv.Itoa(g)
		}
	}
	return FallbackUser
}

// hostDirOf maps a sandbox directory to its host directory through the deepest mount
// holding it.
func hostDirOf(mounts []pathmap.Mount, dir string) (string, bool) {
	best := -1
	for i, m := range mounts {
		s := filepath.Clean(m.Sandbox)
		if dir == s || strings.HasPrefix(dir, strings.TrimSuffix(s, "/")+"/") {
			if best < 0 || len(s) > len(filepath.Clean(mounts[best].Sandbox)) {
				best = i
			}
		}
	}
	if best < 0 {
		return "", false
	}
	m := mounts[best]
	rel := strings.TrimPrefix(strings.TrimPrefix(dir, filepath.Clean(m.Sandbox)), "/")
	return filepath.Join(m.Host, rel), true
}

// check refuses options that cannot work, before anything runs.
func (o Options) check() error {
	for i, m := range o.Mounts {
		field := fmt.Sprintf("Options.Mounts[%d]", i)
		if !filepath.IsAbs(m.Sandbox) || !filepath.IsAbs(m.Host) {
			return &transports.FieldError{Field: field, Reason: fmt.Sprintf("%q at %q: paths must be absolute", m.Host, m.Sandbox)}
		}
		if strings.ContainsAny(m.Host+m.Sandbox, ",\x00") {
			return &transports.FieldError{Field: field, Reason: fmt.Sprintf("%q at %q: a comma or NUL in a path", m.Host, m.Sandbox)}
		}
	}
	if o.RunDir != "" {
		if err := transports.CheckPath("Options.RunDir", o.RunDir); err != nil {
			return err
		}
	}
	if o.Network != "" && (strings.HasPrefix(o.Network, "container:") || o.Network == "host") {
		return &transports.FieldError{Field: "Options.Network", Reason: fmt.Sprintf("%q shares another namespace; name a network or bridge", o.Network)}
	}
	return nil
}
