package kubernetes

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kennel-dev/kennel/transports/docker"
)

// SweepOptions say which kernels' pods and NetworkPolicies Sweep removes.
type SweepOptions struct {
	// Namespace is the namespace swept. Empty means the Client's.
	Namespace string
	// Self is the sweeping controller. The zero value means docker.Self().
	Self docker.Controller
	// Keep reports whether an object of Self's own labelled with this session id belongs
	// to a session Self still has. Nil keeps none of Self's objects.
	Keep func(sessionID string) bool
	// Held, when set, reports whether a record of the sweeping controller names this
	// detached kernel's pod: a detached pod whose owner is gone and that Held does not
	// hold is removed. Nil keeps every running detached pod (they end with their
	// kernels' grace); a detached pod that has ended is removed either way.
	Held func(pod string) bool
}

// SweepResult says what Sweep did.
type SweepResult struct {
	// Removed lists the names of the pods removed.
	Removed []string
	// Policies counts the NetworkPolicies removed.
	Policies int
	// Kept counts kennel pods left alone: a live controller's, another host's, one of
	// Self's sessions that Keep kept, or a detached kernel's that may still be held.
	Kept int
}

// Sweep removes, in the namespace, the pods of kennel's kernels that no live controller
// owns, and their NetworkPolicies: the Docker transport's rule (docker.Sweep) on the
// owner the pods' annotations name. An owner is gone when it is Self and Keep does not
// keep the session, or a controller of this host that is not running (docker.Controller.
// Alive: its pid is not running with the recorded start time, or the host rebooted). So
// a controller killed with SIGKILL leaves no pod once a controller of its host runs
// again, and two live controllers never remove each other's. Objects whose owner
// annotations are incomplete, or whose controller ran on another host, are kept. A
// detached kernel's pod is removed once it has ended (its kernel with it), or when its
// owner is gone and Held does not hold it. Pods are deleted at once (grace 0: their kernels
// have no controller to serve). A NetworkPolicy is removed with its pod, or when its owner
// is gone and no pod of its name is left (a start killed half-way). Errors of single
// removals are joined; the rest go on.
func Sweep(ctx context.Context, cli *Client, o SweepOptions) (SweepResult, error) {
	var res SweepResult
	var err error
	if o.Self, err = o.Self.OrSelf(); err != nil {
		return res, err
	}
	ns := cmp.Or(o.Namespace, cli.Namespace())
	sel := metav1.ListOptions{LabelSelector: LabelKennel + "=1"}
	pods, err := cli.clientset.CoreV1().Pods(ns).List(ctx, sel)
	if err != nil {
		return res, fmt.Errorf("sweep %s: list pods: %w", ns, classify(err))
	}
	var errs []error
	zero := int64(0)
	live := map[string]bool{}
	for _, p := range pods.Items {
		if !sweepablePod(&p, o) {
			res.Kept++
			live[p.Name] = true
			continue
		}
		err := cli.clientset.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete pod %s/%s: %w", ns, p.Name, classify(err)))
			live[p.Name] = true
			continue
		}
		res.Removed = append(res.Removed, p.Name)
	}
	nps, err := cli.clientset.NetworkingV1().NetworkPolicies(ns).List(ctx, sel)
	if err != nil {
		errs = append(errs, fmt.Errorf("list network policies: %w", classify(err)))
	} else {
		removed := map[string]bool{}
		for _, name := range res.Removed {
			removed[name] = true
		}
		for _, np := range nps.Items {
			if live[np.Name] || !removed[np.Name] && !sweepable(np.Labels, np.Annotations, o) {
				continue
			}
			if !removed[np.Name] {
				// An orphan by its owner: only when no pod of its name is left (a pod
				// made after the list is the next sweep's to decide).
				if _, err := cli.clientset.CoreV1().Pods(ns).Get(ctx, np.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					continue
				}
			}
			err := cli.clientset.NetworkingV1().NetworkPolicies(ns).Delete(ctx, np.Name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("delete network policy %s/%s: %w", ns, np.Name, classify(err)))
				continue
			}
			res.Policies++
		}
	}
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("sweep %s: %w", ns, err)
	}
	return res, nil
}

// sweepablePod is Sweep's verdict on one pod.
func sweepablePod(p *corev1.Pod, o SweepOptions) bool {
	if p.Labels[LabelDetached] == "1" {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			return true
		}
		return o.Held != nil && sweepable(p.Labels, p.Annotations, o) && !o.Held(p.Name)
	}
	return sweepable(p.Labels, p.Annotations, o)
}

// sweepable is the owner rule on one object's labels and annotations.
func sweepable(labels, annotations map[string]string, o SweepOptions) bool {
	owner, ok := ownerOf(labels, annotations)
	if !ok {
		return false
	}
	return owner.Sweepable(o.Self, o.Keep, annotations[AnnotationSession])
}
