package kubernetes

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
)

// Defaults of the lock-down and of the pods' lifetime, each changed by a field of Options.
const (
	// DefaultMemory is the memory request and limit of a kernel's pod, 1 GiB.
	DefaultMemory = 1 << 30
	// DefaultMilliCPU is the CPU request and limit in thousandths of a CPU: one CPU.
	DefaultMilliCPU = 1000
	// DefaultTmpSize is the size of the memory-backed emptyDir at /tmp, in bytes (it
	// counts toward the memory limit).
	DefaultTmpSize = 256 << 20
	// DefaultPendingTimeout is how long Start waits for a pod to run before it fails with
	// the scheduler's (or the kubelet's) reason.
	DefaultPendingTimeout = 2 * time.Minute
	// FallbackUser is the kernel's uid:gid when the operator is root and the workspace is
	// root's too: nobody's (the Docker transport's rule).
	FallbackUser = docker.FallbackUser
	// Container is the name of the one container of a kernel's pod.
	Container = "kernel"
	// RunRoot is where a detached kernel's pod mounts the emptyDir that holds its run
	// directory (Options.Detached).
	RunRoot = "/run/kennel"
	// DefaultKernelGrace is how long a detached kernel lives with nothing attached when
	// Options.KernelGrace is zero.
	DefaultKernelGrace = time.Hour
)

// Options configure a Transport. Every zero value is the locked-down default, documented on
// its field; an operator loosens one setting at a time.
type Options struct {
	// Namespace is the namespace the pods and their NetworkPolicies are made in. Empty
	// means the Client's (its kubeconfig context's, or the pod's own in-cluster).
	Namespace string

	// Image is the kernel image. Empty means Ref of the embedded stub: the image `kennel
	// image build` makes, under the name kubelet resolves `docker save`'s
	// kennel-kernel:<hash> to. Its tag is the stub's bundle hash, so a present image is the
	// right stub.
	Image string
	// PullPolicy is the pods' imagePullPolicy. Empty means Never: a session never pulls,
	// and a node that lacks the image fails the start with an error naming it and the
	// commands that put it there (ErrImageMissing).
	PullPolicy corev1.PullPolicy

	// Mounts are the path map's mounts: each becomes a hostPath volume (type Directory:
	// it must exist on the node) of Host mounted at Sandbox, read-only where the mount is.
	// They need Node: a hostPath names the files of the node the pod runs on, and the
	// controller serves fs.* through the path map only where they are its own files.
	Mounts []pathmap.Mount
	// Claims are PersistentVolumeClaims mounted into each pod. A claim's files are
	// served to fs.* only where the controller has the claim mounted itself
	// (Claim.Host); see HostFiles.
	Claims []Claim
	// Node, when set, pins the pods to this node (a required node affinity on its name:
	// the scheduler still admits them). It must be set with Mounts, and it then names the
	// node whose file system the Mounts' host paths are: the controller's own. Empty
	// leaves the node to the scheduler.
	Node string

	// User is the kernel's numeric "uid:gid" (runAsUser, runAsGroup; runAsNonRoot holds:
	// uid 0 is refused). Empty means the Docker transport's default
	// (docker.DefaultUserFor): the operator's own uid:gid, or when that is root the owner
	// of the working directory's host directory, else FallbackUser.
	User string

	// Memory is the memory request and limit in bytes (equal: the pod is Guaranteed).
	// Zero means DefaultMemory; negative means none.
	Memory int64
	// MilliCPU is the CPU request and limit in thousandths of a CPU. Zero means
	// DefaultMilliCPU; negative means none.
	MilliCPU int64
	// TmpSize is the size limit of the memory-backed emptyDir at /tmp in bytes. Zero
	// means DefaultTmpSize.
	TmpSize int64
	// AllowNetwork makes no NetworkPolicy for the pods. By default each pod gets one
	// that denies all its ingress and egress (it takes effect only where the cluster's
	// network plugin enforces NetworkPolicies).
	AllowNetwork bool

	// PendingTimeout is how long Start waits for a pod to run. Zero means
	// DefaultPendingTimeout.
	PendingTimeout time.Duration

	// Controller is the identity of the controller that owns the pods, written into
	// their labels and annotations and used by Sweep. The zero value means docker.Self().
	Controller docker.Controller
	// Owner, when set, is an object of the pods' namespace made the owner of every pod
	// and NetworkPolicy (an ownerReference): the cluster's garbage collector deletes them
	// once it is deleted. A controller that runs in the cluster names its own pod, so its
	// kernels' pods go with it wherever it was rescheduled to (Sweep judges only
	// controllers of its own host). Detached kernels (Detached) go with their owner too:
	// for them name an object that outlives a controller's restart. Nil sets none.
	Owner *metav1.OwnerReference

	// EOFGrace is how long a cell holding the kernel may run after its stdin closed before
	// the stub exits anyway. Zero leaves the stub's default (30 s).
	EOFGrace time.Duration
	// StdinGrace is how long Kill waits after closing stdin before it deletes the pod.
	// Zero means transports.Grace; negative means no wait.
	StdinGrace time.Duration
	// StopGrace is the pod's termination grace (whole seconds, rounded up, at least 1):
	// how long after the TERM its deletion sends the kubelet waits before it kills, and
	// Kill before it deletes the pod by force. Zero means transports.Grace.
	StopGrace time.Duration

	// Detached makes kernels detached (docs/protocol.md, "Protocol 2"): each pod's kernel
	// is started beside a bridge, with its run directory on an emptyDir at RunRoot, and is
	// reached again by an exec of the bridge's attach (Transport.Reattach). The pod
	// outlives the controller while its kernel lives (KernelGrace with nothing attached).
	Detached bool
	// KernelGrace is how long a detached kernel lives with nothing attached. Zero means
	// DefaultKernelGrace.
	KernelGrace time.Duration

	// Pool, when set, is a warm pool (NewPool) a detached kernel is taken from when the
	// pool's kernels have its description: its Info.Pool is then transports.PoolHit, and
	// transports.PoolMiss for one started cold beside the pool. It needs Detached. Nil
	// starts every kernel cold.
	Pool *Pool
}

// Claim is a PersistentVolumeClaim mounted into each kernel's pod.
type Claim struct {
	// Name is the claim's name, in the pods' namespace. Required.
	Name string
	// Sandbox is where the kernel sees it (absolute). Required.
	Sandbox string
	// ReadOnly mounts it read-only.
	ReadOnly bool
	// Host is where the controller has the same volume mounted (a shared file system:
	// NFS, CephFS), or "". Only with it are fs.* requests below Sandbox served, through
	// the path map mount {Sandbox, Host}.
	Host string
}

// UserFor returns the kernel's uid and gid for a start whose working directory is dir (a
// sandbox path): Options.User, or the Docker transport's default.
func (o Options) UserFor(dir string) (uid, gid int64, err error) {
	u := o.User
	if u == "" {
		u = docker.DefaultUserFor(o.Mounts, dir)
	}
	return parseUser(u)
}

// parseUser reads a numeric, non-root "uid:gid".
func parseUser(u string) (int64, int64, error) {
	us, gs, ok := strings.Cut(u, ":")
	uid, err1 := strconv.ParseUint(us, 10, 31)
	gid, err2 := strconv.ParseUint(gs, 10, 31)
	switch {
	case !ok || err1 != nil || err2 != nil:
		return 0, 0, &transports.FieldError{Field: "Options.User", Reason: fmt.Sprintf("%q is not a numeric uid:gid", u)}
	case uid == 0:
		return 0, 0, &transports.FieldError{Field: "Options.User", Reason: "uid 0: pods run as non-root (runAsNonRoot)"}
	}
	return int64(uid), int64(gid), nil
}

// PathMounts are the path map's mounts of a session on this transport: Mounts, and each
// claim the controller has mounted itself (Claim.Host). fs.* requests below another claim
// are refused (HostFiles).
func (o Options) PathMounts() []pathmap.Mount {
	ms := append([]pathmap.Mount(nil), o.Mounts...)
	for _, c := range o.Claims {
		if c.Host != "" {
			ms = append(ms, pathmap.Mount{Sandbox: c.Sandbox, Host: c.Host, ReadOnly: c.ReadOnly})
		}
	}
	return ms
}

// HostFiles reports whether the controller sees the kernel's files at the path map's
// host paths, so that it may serve fs.* requests: nil when every mounted volume is its own
// (Mounts, hostPath volumes of Node, the controller's node; claims it has mounted, Host),
// else an error matching transports.ErrUnavailable naming the claims it has not
// mounted. A session whose kernel has a claim the controller lacks answers fs.* below it
// unavailable (Unserved) rather than serve other files under the same paths.
func (o Options) HostFiles() error {
	var missing []string
	for _, c := range o.Claims {
		if c.Host == "" {
			missing = append(missing, fmt.Sprintf("%s at %s", c.Name, c.Sandbox))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("fs requests: the controller has not mounted the kernel's claims %s (Claim.Host): %w",
			strings.Join(missing, ", "), transports.ErrUnavailable)
	}
	return nil
}

// stopSeconds is the pod's termination grace in whole seconds, at least 1.
func (o Options) stopSeconds() int64 {
	d := transports.ResolveGrace(o.StopGrace)
	return max(1, int64((d+time.Second-1)/time.Second))
}

// check refuses options that cannot work, before anything runs.
func (o Options) check() error {
	if o.Namespace != "" {
		if errs := validation.IsDNS1123Label(o.Namespace); len(errs) > 0 {
			return &transports.FieldError{Field: "Options.Namespace", Reason: fmt.Sprintf("%q: %s", o.Namespace, strings.Join(errs, "; "))}
		}
	}
	if o.Node != "" {
		if errs := validation.IsDNS1123Subdomain(o.Node); len(errs) > 0 {
			return &transports.FieldError{Field: "Options.Node", Reason: fmt.Sprintf("%q: %s", o.Node, strings.Join(errs, "; "))}
		}
	}
	switch o.PullPolicy {
	case "", corev1.PullNever, corev1.PullIfNotPresent, corev1.PullAlways:
	default:
		return &transports.FieldError{Field: "Options.PullPolicy", Reason: fmt.Sprintf("%q is not Never, IfNotPresent or Always", o.PullPolicy)}
	}
	if o.Pool != nil && !o.Detached {
		return &transports.FieldError{Field: "Options.Pool", Reason: "a pool's kernels are detached: set Detached"}
	}
	if len(o.Mounts) > 0 && o.Node == "" {
		return &transports.FieldError{Field: "Options.Node", Reason: "Mounts are hostPath volumes: name the node whose files they are (the controller's own)"}
	}
	seen := map[string]string{}
	sandbox := func(field, p string) error {
		if err := transports.CheckPath(field, p); err != nil {
			return err
		}
		p = path.Clean(p)
		if p == "/tmp" || p == "/" || (o.Detached && (p == RunRoot || strings.HasPrefix(RunRoot, p+"/"))) {
			return &transports.FieldError{Field: field, Reason: fmt.Sprintf("%q is the pod's own", p)}
		}
		if other, ok := seen[p]; ok {
			return &transports.FieldError{Field: field, Reason: fmt.Sprintf("%q is mounted by %s too", p, other)}
		}
		seen[p] = field
		return nil
	}
	for i, m := range o.Mounts {
		field := fmt.Sprintf("Options.Mounts[%d]", i)
		if err := sandbox(field, m.Sandbox); err != nil {
			return err
		}
		if err := transports.CheckPath(field, m.Host); err != nil {
			return err
		}
	}
	for i, c := range o.Claims {
		field := fmt.Sprintf("Options.Claims[%d]", i)
		if errs := validation.IsDNS1123Subdomain(c.Name); len(errs) > 0 {
			return &transports.FieldError{Field: field, Reason: fmt.Sprintf("claim %q: %s", c.Name, strings.Join(errs, "; "))}
		}
		if err := sandbox(field, c.Sandbox); err != nil {
			return err
		}
		if c.Host != "" {
			if err := transports.CheckPath(field, c.Host); err != nil {
				return err
			}
		}
	}
	if o.User != "" {
		if _, _, err := parseUser(o.User); err != nil {
			return err
		}
	}
	if o.Owner != nil && (o.Owner.APIVersion == "" || o.Owner.Kind == "" || o.Owner.Name == "" || o.Owner.UID == "") {
		return &transports.FieldError{Field: "Options.Owner", Reason: "an owner needs its apiVersion, kind, name and uid"}
	}
	return nil
}
