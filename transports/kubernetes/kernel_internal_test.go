package kubernetes

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
)

// oomPod is a kernel's pod whose container is in state s.
func oomPod(s corev1.ContainerState) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "kennel-0011223344556677", Namespace: "ns"},
		Status: corev1.PodStatus{
			Phase:             corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{{Name: Container, State: s}},
		},
	}
}

var (
	running    = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	oomEnded   = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}
	errorEnded = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error"}}
)

// oomKernel is a kernel of pod on a fake API server whose execs all fail (the container
// cannot be asked, as one an OOM ended); watching is closed once oomKilled watches the pod.
func oomKernel(t *testing.T, pod *corev1.Pod) (k *Kernel, cs *fake.Clientset, watching <-chan struct{}) {
	t.Helper()
	tr := testTransport(t, Options{})
	cs = fake.NewClientset(pod)
	w := make(chan struct{})
	var once sync.Once
	cs.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		once.Do(func() { close(w) })
		return false, nil, nil
	})
	tr.cli.clientset = execVia{cs, tr.cli.clientset.CoreV1().RESTClient()}
	return &Kernel{t: tr, pod: pod.Name}, cs, w
}

// execVia is a fake clientset whose exec subresource requests go to rest (the fake has no
// REST client): an address where nothing listens, so every exec fails.
type execVia struct {
	*fake.Clientset
	rest rest.Interface
}

func (c execVia) CoreV1() typedcorev1.CoreV1Interface { return coreVia{c.Clientset.CoreV1(), c.rest} }

type coreVia struct {
	typedcorev1.CoreV1Interface
	rest rest.Interface
}

func (c coreVia) RESTClient() rest.Interface { return c.rest }

// The race of an OOM that ends the container: the kernel's stream ends (137) before the
// kubelet reports the container OOMKilled, and the container can no longer be asked.
// oomKilled waits for the report and answers OOM as soon as it comes; a report of another
// end, a pod deleted, or no report within oomStatusWait are no OOM.
func TestOOMKilledWaitsForTheKubelet(t *testing.T) {
	defer func(d time.Duration) { oomStatusWait = d }(oomStatusWait)
	oomStatusWait = 3 * time.Second
	for _, c := range []struct {
		name      string
		first     corev1.ContainerState
		then      func(context.Context, *fake.Clientset, *corev1.Pod) error // nil: nothing more
		want      bool
		atBound   bool // answered only at oomStatusWait
		noWatches bool
	}{
		{name: "already OOMKilled", first: oomEnded, want: true, noWatches: true},
		{name: "already ended otherwise", first: errorEnded, want: false, noWatches: true},
		{name: "OOMKilled reported late", first: running, want: true, then: func(ctx context.Context, cs *fake.Clientset, p *corev1.Pod) error {
			p = oomPod(oomEnded)
			_, err := cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			return err
		}},
		{name: "another end reported late", first: running, want: false, then: func(ctx context.Context, cs *fake.Clientset, p *corev1.Pod) error {
			p = oomPod(errorEnded)
			_, err := cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			return err
		}},
		{name: "pod deleted", first: running, want: false, then: func(ctx context.Context, cs *fake.Clientset, p *corev1.Pod) error {
			return cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
		}},
		{name: "no report", first: running, want: false, atBound: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			pod := oomPod(c.first)
			k, cs, watching := oomKernel(t, pod)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errc := make(chan error, 1)
			go func() {
				if c.then == nil {
					errc <- nil
					return
				}
				select {
				case <-watching:
				case <-ctx.Done():
					errc <- ctx.Err()
					return
				}
				time.Sleep(200 * time.Millisecond) // the kubelet's report comes later still
				errc <- c.then(ctx, cs, pod)
			}()
			t0 := time.Now()
			got := k.oomKilled(ctx)
			took := time.Since(t0)
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("oomKilled = %v, want %v", got, c.want)
			}
			switch {
			case c.atBound && took < oomStatusWait:
				t.Errorf("answered after %v, before the bound %v", took, oomStatusWait)
			case !c.atBound && took >= oomStatusWait:
				t.Errorf("answered after %v, at the bound %v", took, oomStatusWait)
			}
			watched := false
			for _, a := range cs.Actions() {
				watched = watched || a.GetVerb() == "watch"
			}
			if c.noWatches && watched {
				t.Errorf("watched a pod whose status already told")
			}
			t.Logf("%v in %v", got, took)
		})
	}
}

// The wait is bounded by ctx too.
func TestOOMKilledContext(t *testing.T) {
	k, _, _ := oomKernel(t, oomPod(running))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	if k.oomKilled(ctx) {
		t.Error("oomKilled with no report: true")
	}
	if took := time.Since(t0); took > 5*time.Second {
		t.Errorf("oomKilled took %v past its context's end", took)
	}
}

// runsInit takes a /proc cmdline for podSpec's main process alone: the interpreter, -I,
// -S, -c and init.py's program; a sandbox's process (another program, other flags) or a
// test process is not it.
func TestRunsInit(t *testing.T) {
	pod := (&Transport{}).podSpec("p", "s", "python3", 65534, 65534)
	cmdline := []byte(strings.Join(pod.Spec.Containers[0].Command, "\x00") + "\x00")
	if !runsInit(cmdline) {
		t.Errorf("podSpec's own command %q is not taken", pod.Spec.Containers[0].Command)
	}
	for _, bad := range []string{
		"runsc-sandbox\x00--root\x00/run/runsc\x00",
		"python3\x00-I\x00-S\x00-c\x00print(1)\x001\x00600\x00",
		"python3\x00-c\x00" + initProgram + "\x00",
		"",
	} {
		if runsInit([]byte(bad)) {
			t.Errorf("cmdline %q taken for init.py", bad)
		}
	}
	if isContainerInit(os.Getpid(), "") {
		t.Error("the test process taken for a container's init")
	}
}
