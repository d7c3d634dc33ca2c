package kubernetes

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/images/kernelimage"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
	"github.com/kennel-dev/kennel/transports/internal/limits"
)

// Name is the Kubernetes transport's name, as in Info.Transport.
const Name = "kubernetes"

// ErrImageMissing reports that the node a kernel's pod was given to lacks the kernel image
// and may not pull it. A session never pulls by default: the fix is `kennel image build`
// and an import into the node's container runtime, which the error names. Its class is
// errdefs.ErrUnavailable.
var ErrImageMissing = fmt.Errorf("kernel image missing on the node: %w", errdefs.ErrUnavailable)

// ErrPending reports a pod that did not run within Options.PendingTimeout: its error
// says the scheduler's reason (or the kubelet's). Its class is errdefs.ErrUnavailable.
var ErrPending = fmt.Errorf("pod still pending: %w", errdefs.ErrUnavailable)

// Ref is the image name of bundle's kernel image as kubelet resolves the Docker kernel
// image's tag (kernelimage.KernelRef): docker.io/library/kennel-kernel:<bundle hash first
// 12>, the name `docker save` archives give it in a node's containerd.
func Ref(b *images.Bundle) string { return "docker.io/library/" + kernelimage.KernelRef(b) }

// Transport starts each kernel in a pod of its own through the API server. It is safe for
// concurrent use.
type Transport struct {
	cli    *Client
	opts   Options
	ns     string
	image  string
	bundle *images.Bundle
}

// New returns a Transport over cli. It starts nothing and does not contact the API server;
// Options are checked here: a refusal is a *transports.FieldError
// (errdefs.ErrInvalidArgument).
func New(cli *Client, opts Options) (*Transport, error) {
	if cli == nil {
		return nil, fmt.Errorf("new kubernetes transport: %w", &transports.FieldError{Field: "cli", Reason: "no kubernetes client"})
	}
	err := opts.check()
	if err != nil {
		return nil, err
	}
	if opts.Controller, err = opts.Controller.OrSelf(); err != nil {
		return nil, err
	}
	b, err := images.Stub()
	if err != nil {
		return nil, err
	}
	opts.Mounts = append(opts.Mounts[:0:0], opts.Mounts...)
	opts.Claims = append(opts.Claims[:0:0], opts.Claims...)
	if opts.Owner != nil {
		owner := *opts.Owner
		opts.Owner = &owner
	}
	return &Transport{cli: cli, opts: opts, ns: cmp.Or(opts.Namespace, cli.Namespace()), image: cmp.Or(opts.Image, Ref(b)), bundle: b}, nil
}

// Name returns "kubernetes".
func (t *Transport) Name() string { return Name }

// Capabilities reports only whether kernels are detached (Options.Detached): a pod has its
// own environment, pids and file system (the path map's mounts are its volumes).
func (t *Transport) Capabilities() transports.Capabilities {
	return transports.Capabilities{Detached: t.opts.Detached}
}

// Image returns the kernel image the pods run.
func (t *Transport) Image() string { return t.image }

// Namespace returns the namespace the pods are made in.
func (t *Transport) Namespace() string { return t.ns }

func (t *Transport) pods() typedcorev1.PodInterface { return t.cli.clientset.CoreV1().Pods(t.ns) }

// Start makes a kernel's pod and starts the kernel in it; it returns once the kernel's
// exec runs, its hello the first frame on Stdout. ctx bounds only the start. On error
// nothing is left: no pod, no NetworkPolicy.
//
// In order: the NetworkPolicy that denies the pod all traffic (unless
// Options.AllowNetwork), then the pod (podSpec: the lock-down), both labelled with
// LabelKennel, LabelSession, LabelController and LabelPod and annotated with the session
// and the controller's identity; then Start waits, up to Options.PendingTimeout, for the
// pod's container to run: a node without the image fails at once (ErrImageMissing, naming
// the image and the commands that make and import it), a pod still pending at the deadline
// fails with the scheduler's reason (ErrPending), a pod that fails with the kubelet's.
// Then the kernel is an exec of `PYTHON -I -S -c PROGRAM` in the pod (WebSocket first,
// SPDY as fallback), PROGRAM reading its start block from stdin (kernelstart.Block):
// Spec.Dir and the kernel's whole environment, which never appears in the pod's spec or
// the exec's argv: PATH=kernelstart.DefaultPath, HOME=/tmp and LANG=C.UTF-8, the stub's
// defaults, Spec.Env, then the transport's own entries (the bundle hash,
// KENNEL_KERNEL_OWNER=stdin, KENNEL_KERNEL_EOF_GRACE when set), a later key winning. The
// stub is the image's (kernelimage.StubDir); PYTHON is Spec.Python or "python3" on that
// PATH. A Spec refused before anything ran is a *transports.FieldError.
func (t *Transport) Start(ctx context.Context, spec transports.Spec) (_ transports.Kernel, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("start kubernetes kernel %q: %w", spec.SessionID, err)
		}
	}()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	if err := transports.CheckSpec(spec); err != nil {
		return nil, err
	}
	uid, gid, err := t.opts.UserFor(spec.Dir)
	if err != nil {
		return nil, err
	}
	python := cmp.Or(spec.Python, "python3")
	random := make([]byte, 8)
	_, _ = rand.Read(random) // never fails
	name := podName(random)
	if t.opts.Detached && t.opts.Pool != nil {
		if k, err := t.opts.Pool.handOut(ctx, t, spec, python); k != nil || err != nil {
			return k, err
		}
	}

	var undo kernelstart.Undo
	defer undo.Run(ctx, &err)
	pod, err := t.makePod(ctx, name, spec.SessionID, uid, gid, &undo)
	if err != nil {
		return nil, err
	}
	if t.opts.Detached {
		k, err := t.startDetached(ctx, pod, spec, python)
		if err != nil {
			return nil, err
		}
		if t.opts.Pool != nil {
			k.SetPool(transports.PoolMiss)
		}
		return k, nil
	}
	block, err := kernelstart.Block{Dir: spec.Dir, Stub: kernelimage.StubDir, Env: t.kernelEnv("").Build(spec.Env)}.Encode()
	if err != nil {
		return nil, err
	}
	argv := []string{python, "-I", "-S", "-c", kernelstart.Program(kernelstart.BootProgram())}
	s, err := t.cli.startExec(t.ns, name, argv, spec.Stderr)
	if err != nil {
		return nil, err
	}
	undo = append(undo, func(context.Context) { s.Close() })
	// The block is read once the stream is up: its write is the start's last wait, which
	// ctx's end cuts short.
	stop := context.AfterFunc(ctx, func() { _ = s.SetWriteDeadline(time.Now()) })
	_, werr := s.Write(block)
	stop()
	_ = s.SetWriteDeadline(time.Time{})
	if werr != nil {
		if cause := context.Cause(ctx); cause != nil {
			return nil, cause
		}
		select {
		case <-s.Done():
			_, serr := s.result()
			return nil, fmt.Errorf("exec in pod %s/%s: %w: %w", t.ns, name, transports.ErrUnavailable, cmp.Or(serr, werr))
		case <-time.After(5 * time.Second):
			return nil, fmt.Errorf("exec in pod %s/%s: write the start block: %w", t.ns, name, werr)
		}
	}
	return newKernel(t, pod, s), nil
}

// makePod makes pod name's NetworkPolicy (unless Options.AllowNetwork) and the pod, for
// session ("" for a pool's pod) as uid:gid, and waits until it runs. What it makes is
// undone by the functions it adds to undo, which the caller runs on error.
func (t *Transport) makePod(ctx context.Context, name, session string, uid, gid int64, undo *kernelstart.Undo) (*corev1.Pod, error) {
	if !t.opts.AllowNetwork {
		*undo = append(*undo, func(ctx context.Context) { _ = t.deletePolicy(ctx, name) })
		if _, err := t.cli.clientset.NetworkingV1().NetworkPolicies(t.ns).Create(ctx, t.policy(name, session), metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create network policy %s/%s: %w", t.ns, name, classify(err))
		}
	}
	*undo = append(*undo, func(ctx context.Context) { _ = t.deletePod(ctx, name, 0) })
	spec := t.podSpec(name, session, "python3", uid, gid)
	if session == "" {
		spec.Labels[LabelPool] = "1"
	}
	created, err := t.pods().Create(ctx, spec, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod %s/%s: %w", t.ns, name, classify(err))
	}
	return t.waitRunning(ctx, created)
}

// waitRunning waits until pod's container runs, up to Options.PendingTimeout.
func (t *Transport) waitRunning(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	pending := limits.Positive(t.opts.PendingTimeout, DefaultPendingTimeout)
	wctx, cancel := context.WithTimeoutCause(ctx, pending, ErrPending)
	defer cancel()
	var last, running *corev1.Pod
	err := t.watchPod(wctx, pod.Name, pod, func(p *corev1.Pod) (bool, error) {
		if p == nil {
			return false, fmt.Errorf("pod %s/%s deleted while it started: %w", t.ns, pod.Name, transports.ErrUnavailable)
		}
		last = p
		ok, err := t.podRunning(p)
		if ok {
			running = p
		}
		return ok, err
	})
	if err == nil {
		return running, nil
	}
	if errors.Is(context.Cause(wctx), ErrPending) && context.Cause(ctx) == nil {
		return nil, fmt.Errorf("pod %s/%s not running after %v: %s: %w", t.ns, pod.Name, pending, t.pendingReason(last), ErrPending)
	}
	return nil, err
}

// podRunning reads one state of a starting pod: running (its container runs), on its way,
// or failed (the error says why: the image missing, the container not made, the pod
// ended).
func (t *Transport) podRunning(p *corev1.Pod) (bool, error) {
	what := fmt.Sprintf("pod %s/%s", t.ns, p.Name)
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != Container {
			continue
		}
		switch {
		case cs.State.Running != nil && p.Status.Phase == corev1.PodRunning:
			return true, nil
		case cs.State.Waiting != nil:
			w := cs.State.Waiting
			switch w.Reason {
			case "ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff", "InvalidImageName":
				return false, t.imageMissing(p, w.Reason, w.Message)
			case "CreateContainerConfigError", "CreateContainerError", "RunContainerError", "StartError", "CrashLoopBackOff":
				return false, fmt.Errorf("%s: container %s: %s: %w", what, w.Reason, bounded(w.Message), transports.ErrUnavailable)
			}
		case cs.State.Terminated != nil:
			x := cs.State.Terminated
			return false, fmt.Errorf("%s: container ended before the kernel started: %s (exit %d): %s: %w", what, x.Reason, x.ExitCode, bounded(x.Message), transports.ErrUnavailable)
		}
	}
	switch p.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return false, fmt.Errorf("%s: %s before the kernel started: %s: %s: %w", what, p.Status.Phase, p.Status.Reason, bounded(p.Status.Message), transports.ErrUnavailable)
	}
	if p.DeletionTimestamp != nil {
		return false, fmt.Errorf("%s: deleted while it started: %w", what, transports.ErrUnavailable)
	}
	return false, nil
}

// imageMissing is the error of a node that lacks the kernel image.
func (t *Transport) imageMissing(p *corev1.Pod, reason, message string) error {
	node := cmp.Or(p.Spec.NodeName, "(unknown)")
	tag := strings.TrimPrefix(t.image, "docker.io/library/")
	return fmt.Errorf("pod %s/%s: %s: %s: image %s on node %s: make it with `%s`, then import it into the node's container runtime (`docker save %s | ctr -n k8s.io images import -`; kubetest imports it into its test cluster): %w",
		t.ns, p.Name, reason, bounded(message), t.image, node, kernelimage.BuildCommand, tag, ErrImageMissing)
}

// pendingReason says why a pod is not running: the scheduler's condition, its container's
// wait, and the newest warning event about it.
func (t *Transport) pendingReason(p *corev1.Pod) string {
	if p == nil {
		return "no state seen"
	}
	var why []string
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			why = append(why, fmt.Sprintf("not scheduled: %s: %s", c.Reason, bounded(c.Message)))
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			why = append(why, fmt.Sprintf("container waiting: %s: %s", w.Reason, bounded(w.Message)))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	evs, err := t.cli.clientset.CoreV1().Events(t.ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.name", p.Name), fields.OneTermEqualSelector("type", corev1.EventTypeWarning)).String(),
	})
	if err == nil && len(evs.Items) > 0 {
		e := slices.MaxFunc(evs.Items, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
		why = append(why, fmt.Sprintf("event %s: %s", e.Reason, bounded(e.Message)))
	}
	if len(why) == 0 {
		return "phase " + string(p.Status.Phase)
	}
	return strings.Join(why, "; ")
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

// bounded cuts a message of the cluster's to 512 bytes.
func bounded(s string) string {
	if len(s) > 512 {
		return s[:512] + "…"
	}
	return s
}

// watchPod calls f with pod name's states as they change, from cur (nil: fetched first),
// until f is done or fails, or ctx ends (its cause). f gets nil once the pod is gone.
func (t *Transport) watchPod(ctx context.Context, name string, cur *corev1.Pod, f func(*corev1.Pod) (bool, error)) error {
	pods := t.pods()
	for {
		if cur == nil {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				_, err := f(nil)
				return err
			case err != nil:
				if cause := context.Cause(ctx); cause != nil {
					return cause
				}
				return fmt.Errorf("get pod %s/%s: %w", t.ns, name, classify(err))
			}
			cur = p
		}
		if done, err := f(cur); done || err != nil {
			return err
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
			ResourceVersion: cur.ResourceVersion,
		})
		if err != nil {
			if cause := context.Cause(ctx); cause != nil {
				return cause
			}
			return fmt.Errorf("watch pod %s/%s: %w", t.ns, name, classify(err))
		}
		done, err := func() (bool, error) {
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return true, context.Cause(ctx)
				case ev, ok := <-w.ResultChan():
					if !ok {
						return false, nil // closed by the server: fetch again
					}
					switch ev.Type {
					case watch.Added, watch.Modified:
						p, ok := ev.Object.(*corev1.Pod)
						if !ok {
							continue
						}
						cur = p
						if done, err := f(p); done || err != nil {
							return true, err
						}
					case watch.Deleted:
						_, err := f(nil)
						return true, err
					case watch.Error:
						return false, nil // expired or failed: fetch again
					}
				}
			}
		}()
		if done {
			return err
		}
		cur = nil
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(100 * time.Millisecond): // a watch the server ends at once
		}
	}
}

// deletePod deletes pod name with a grace of grace seconds (0: at once, by force).
// A pod already gone is no error.
func (t *Transport) deletePod(ctx context.Context, name string, grace int64) error {
	err := t.pods().Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s/%s: %w", t.ns, name, classify(err))
	}
	return nil
}

// deletePolicy deletes NetworkPolicy name; one already gone is no error.
func (t *Transport) deletePolicy(ctx context.Context, name string) error {
	err := t.cli.clientset.NetworkingV1().NetworkPolicies(t.ns).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete network policy %s/%s: %w", t.ns, name, classify(err))
	}
	return nil
}

// removePod deletes pod name with a grace of grace seconds and waits until it is gone:
// past the grace and 5 s more it deletes it by force and waits up to 10 s again. Then it
// deletes its NetworkPolicy. A pod already gone is no error.
func (t *Transport) removePod(ctx context.Context, name string, grace int64) error {
	var errs []error
	if err := t.deletePod(ctx, name, grace); err != nil {
		errs = append(errs, err)
	} else if err := t.waitGone(ctx, name, time.Duration(grace)*time.Second+5*time.Second); err != nil {
		if err := t.deletePod(ctx, name, 0); err != nil {
			errs = append(errs, err)
		} else if err := t.waitGone(ctx, name, 10*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if !t.opts.AllowNetwork {
		errs = append(errs, t.deletePolicy(ctx, name))
	}
	return errors.Join(errs...)
}

// waitGone waits up to d for pod name to be gone.
func (t *Transport) waitGone(ctx context.Context, name string, d time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := t.watchPod(wctx, name, nil, func(p *corev1.Pod) (bool, error) { return p == nil, nil })
	if err != nil {
		return fmt.Errorf("pod %s/%s still there after %v: %w", t.ns, name, d, err)
	}
	return nil
}
