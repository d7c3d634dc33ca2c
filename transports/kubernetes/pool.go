package kubernetes

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/images/kernelimage"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
	"github.com/kennel-dev/kennel/transports/internal/limits"
	"github.com/kennel-dev/kennel/transports/internal/nsmount"
	"github.com/kennel-dev/kennel/transports/internal/warm"
)

// DefaultRuntime is the CRI endpoint of a node's container runtime when PoolOptions
// names none there (kennel serve): containerd's, as kubelet's default.
const DefaultRuntime = "unix:///run/containerd/containerd.sock"

// PoolOptions configure a Pool.
type PoolOptions struct {
	// Size is how many ready kernels the pool keeps, at least 1.
	Size int
	// Kernel is the description of the pool's kernels: Detached, Node the controller's
	// own node, no Mounts or Claims, with the namespace, image, lock-down and owner a
	// session's Options must have for its kernel to come from the pool. An empty User is
	// the default for a working directory on no mount: the operator's uid:gid,
	// FallbackUser for root.
	Kernel Options
	// Runtime is the CRI endpoint of that node's container runtime (the socket kubelet
	// uses, e.g. unix:///run/containerd/containerd.sock): it says which host process runs
	// a pod's container. Required.
	Runtime string
	// Logger gets the pool's failures. Nil discards them.
	Logger *slog.Logger
}

// Pool keeps ready kernels of one description: each a pod made and running on the
// controller's own node (Options.Node), its detached kernel started beside the bridge,
// the stub loaded and its socket bound, waiting for its session. A Transport whose
// Options.Pool is set hands one to a Start of the pool's description (the client,
// namespace, image, user, interpreter, lock-down, node and owner) as the Docker
// transport's pool does (docker.Pool): the session's mounts are cloned on this host and
// attached in the container's mount namespace (transports/internal/nsmount; the
// container's process is found through the node's CRI), the pod is labelled with the
// session, then the kernel's start command gives it its start block (the token, the
// session's whole environment and its working directory) and becomes its first
// connection. Any other Start is cold (Info.Pool transports.PoolMiss). A pooled kernel is
// used once.
//
// The pool needs a root controller on the pods' node and a runtime there that runs
// containers on this host's kernel (runc, crun); NewPool refuses anything else. A ready
// kernel's start command is an exec that waits for its start block: a kernel whose exec
// ends (a kubelet's streaming idle timeout, a pod deleted) is dropped and replaced. Close
// removes the ready kernels' pods. A controller that dies leaves its ready kernels'
// execs to end with its connections: the kernels exit, and their pods end once idle
// (init.py) and are swept.
type Pool struct {
	rt   *nodeRuntime
	warm *warm.Pool[*pooledPod]
}

// NewPool returns a pool of opts.Size kernels over cli (the client the sessions' own
// Transports use) and starts filling it in the background; ctx bounds only its check
// that the node's runtime answers. A refusal is a
// *transports.FieldError (errdefs.ErrInvalidArgument), or errdefs.ErrUnavailable for what
// this controller or the node's runtime cannot do.
func NewPool(ctx context.Context, cli *Client, opts PoolOptions) (*Pool, error) {
	o := opts.Kernel
	run := ""
	if o.Detached {
		run = RunRoot
	}
	if err := warm.Check(warm.Kernel{Kind: Name, Size: opts.Size, RunDir: run, Mounts: len(o.Mounts) + len(o.Claims), Pooled: o.Pool != nil}); err != nil {
		return nil, err
	}
	if o.Node == "" {
		return nil, &transports.FieldError{Field: "PoolOptions.Kernel.Node", Reason: "empty: a pool's pods run on the controller's own node, where a session's directories are mounted at hand-out"}
	}
	if opts.Runtime == "" {
		return nil, &transports.FieldError{Field: "PoolOptions.Runtime", Reason: "empty: the node's CRI endpoint says which process runs a pod's container"}
	}
	o.User = cmp.Or(o.User, docker.DefaultUser(os.Getuid(), os.Getgid(), nil))
	tr, err := New(cli, o)
	if err != nil {
		return nil, err
	}
	uid, gid, err := tr.opts.UserFor("/")
	if err != nil {
		return nil, err
	}
	rt, err := dialRuntime(ctx, opts.Runtime)
	if err != nil {
		return nil, err
	}
	p := &Pool{rt: rt}
	p.warm = warm.New(warm.Options[*pooledPod]{Kind: Name, Key: tr.poolKey("/", "python3"), Size: opts.Size, Logger: opts.Logger,
		Start: func(ctx context.Context) (*pooledPod, error) { return p.start(ctx, tr, uid, gid) }})
	return p, nil
}

// poolKey is what a kernel of t's for a session in dir and of python must share with a
// pool's kernels to be one of them: the client, namespace, image and pull policy, the
// user (dir's), the interpreter, the whole lock-down, the node, the owner and the
// controller; "" (no pool's) when dir's user does not resolve.
func (t *Transport) poolKey(dir, python string) string {
	o := t.opts
	uid, gid, err := o.UserFor(dir)
	if err != nil {
		return ""
	}
	k, _ := json.Marshal([]any{
		fmt.Sprintf("%p", t.cli), t.ns, t.image, o.PullPolicy, uid, gid, python,
		limits.Of(o.Memory, DefaultMemory), limits.Of(o.MilliCPU, DefaultMilliCPU), limits.Of(o.TmpSize, DefaultTmpSize),
		o.AllowNetwork, o.Node, o.Claims, o.stopSeconds(), o.Owner, o.Controller.ID(),
	})
	return string(k)
}

// Stats returns what the pool has done so far.
func (p *Pool) Stats() transports.PoolStats { return p.warm.Stats() }

// Close stops the pool's filling and removes its ready kernels' pods. It waits for a
// start under way; later Starts go cold.
func (p *Pool) Close(ctx context.Context) error {
	err := p.warm.Close(ctx)
	_ = p.rt.Close()
	return err
}

// pooledPod is a ready kernel: its pod, the mount namespace of its container (held until
// the hand-out) and its start command, waiting for the start block.
type pooledPod struct {
	t      *Transport
	name   string
	kernel string // the kernel's id, its run directory's name
	ns     *os.File
	cmd    *kernelstart.Pooled
	exited chan struct{} // closed once the start command ends
}

// start makes one ready kernel of t's, as uid:gid: its pod, then its kernel.
func (p *Pool) start(ctx context.Context, t *Transport, uid, gid int64) (_ *pooledPod, err error) {
	id := make([]byte, 8)
	_, _ = rand.Read(id) // never fails
	pp := &pooledPod{t: t, name: podName(id), kernel: hex.EncodeToString(id), exited: make(chan struct{})}
	var undo kernelstart.Undo
	defer undo.Run(ctx, &err)
	pod, err := t.makePod(ctx, pp.name, "", uid, gid, &undo)
	if err != nil {
		return nil, err
	}
	undo = append(undo, func(context.Context) {
		if pp.ns != nil {
			_ = pp.ns.Close()
		}
		if pp.cmd != nil {
			_ = pp.cmd.Close()
		}
	})
	var cid string
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == Container {
			_, cid, _ = strings.Cut(cs.ContainerID, "://")
		}
	}
	if cid == "" {
		return nil, fmt.Errorf("pod %s/%s: no container id in its status: %w", t.ns, pp.name, errdefs.ErrUnavailable)
	}
	pid, err := p.rt.containerPid(ctx, cid)
	if err != nil {
		return nil, err
	}
	if !waitContainerInit(ctx, pid, cid) {
		return nil, fmt.Errorf("pod %s/%s: the runtime's process %d of container %s is not its init.py on this host's kernel (a runtime that sandboxes containers, such as gVisor, keeps their mounts out of reach): %w", t.ns, pp.name, pid, cid, errdefs.ErrUnavailable)
	}
	if pp.ns, err = nsmount.Hold(pid, func() bool { return isContainerInit(pid, cid) }); err != nil {
		return nil, err
	}
	b := t.bridged(pp.name, "python3")
	env := append(t.kernelEnv(b.RunDir(pp.kernel)).Build(nil), images.EnvPooled+"=1")
	block, err := kernelstart.Block{Dir: "/tmp", Run: b.RunDir(pp.kernel), Stub: kernelimage.StubDir, Env: env}.Encode()
	if err != nil {
		return nil, err
	}
	// Bounded: a start exec that stalls must not hold the pool's filler.
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if pp.cmd, err = kernelstart.StartPooled(sctx, b.Run, detachedArgv("python3"), block, nil); err != nil {
		return nil, fmt.Errorf("start a pooled kernel in pod %s/%s: %w", t.ns, pp.name, err)
	}
	go func() {
		_, _ = pp.cmd.Exit(context.Background())
		close(pp.exited)
	}()
	return pp, nil
}

// Exited is closed once the kernel's start command ends (warm.Ready).
func (pp *pooledPod) Exited() <-chan struct{} { return pp.exited }

// String names the pod (warm.Ready).
func (pp *pooledPod) String() string { return "pod " + pp.t.ns + "/" + pp.name }

// Discard ends the kernel and removes its pod and NetworkPolicy (warm.Ready).
func (pp *pooledPod) Discard(ctx context.Context) {
	if pp.ns != nil {
		_ = pp.ns.Close()
	}
	_ = pp.cmd.Close()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	_ = pp.t.removePod(rctx, pp.name, 1)
}

// handOut gives the session of spec, started by t with python, a ready kernel: it
// returns nil and no error when the pool has none of t's description (a miss: the caller
// starts one cold) or could not make one the session's, before or after its start block,
// its pod labelled with the session (it is removed, and counted as a failure; see
// warm.Pool.Lost for the errors that do not go cold).
func (p *Pool) handOut(ctx context.Context, t *Transport, spec transports.Spec, python string) (transports.Kernel, error) {
	pp, ok := p.warm.Take(t.poolKey(spec.Dir, python))
	if !ok {
		return nil, nil
	}
	if err := nsmount.Into(pp.ns, nsmount.Binds(t.opts.Mounts)); err != nil {
		p.warm.Failed(pp, err)
		return nil, nil
	}
	_ = pp.ns.Close()
	pp.ns = nil
	token := make([]byte, 32)
	_, _ = rand.Read(token) // never fails
	b := t.bridged(pp.name, python)
	rec := transports.Record{Kernel: pp.kernel, Token: hex.EncodeToString(token), RunDir: b.RunDir(pp.kernel)}
	// The pod is labelled with its session while its kernel gets its start block.
	labelled := make(chan error, 1)
	go func() { labelled <- t.labelSession(ctx, pp.name, spec.SessionID) }()
	fail := func(err error) (transports.Kernel, error) {
		pp.Discard(ctx)
		return nil, p.warm.Lost(ctx, pp, fmt.Errorf("hand out pooled kernel of pod %s/%s: %w", t.ns, pp.name, err))
	}
	var bk *kernelstart.BridgedKernel
	conn, err := pp.cmd.HandOut(ctx, []byte(warm.StartBlock(rec.Token, spec.Dir, t.kernelEnv(rec.RunDir).Build(spec.Env))))
	if err == nil {
		bk, err = b.Start(ctx, conn, rec)
	}
	if lerr := <-labelled; err == nil && lerr != nil {
		_ = bk.Kill(context.WithoutCancel(ctx))
		err = lerr
	}
	if err != nil {
		return fail(err)
	}
	k := newDetachedKernel(t, pp.name, bk)
	k.SetPool(transports.PoolHit)
	return k, nil
}

// labelSession gives pod name the session's label and annotation, as a pod made for the
// session has.
func (t *Transport) labelSession(ctx context.Context, name, session string) error {
	if session == "" {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]string{LabelSession: labelValue(session)},
		"annotations": map[string]string{AnnotationSession: session},
	}})
	if err != nil {
		return err
	}
	if _, err := t.pods().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("label pod %s/%s with its session: %w", t.ns, name, classify(err))
	}
	return nil
}
