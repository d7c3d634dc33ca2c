package kubernetes_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
	kube "github.com/kennel-dev/kennel/transports/kubernetes"
	"github.com/kennel-dev/kennel/transports/kubernetes/kubetest"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// Environment of a child controller: the test cluster's kubeconfig and namespace.
const (
	kubeconfigEnv = "KENNEL_KUBERNETES_TEST_KUBECONFIG"
	namespaceEnv  = "KENNEL_KUBERNETES_TEST_NAMESPACE"
)

// kennelPods lists the kennel pods of the test namespace.
func kennelPods(t testing.TB, c *kubetest.C) []corev1.Pod {
	t.Helper()
	ps, err := c.Client.CoreV1().Pods(c.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: kube.LabelKennel + "=1"})
	if err != nil {
		t.Fatal(err)
	}
	return ps.Items
}

// left counts what kennel left in the test namespace: pods and NetworkPolicies.
func left(t testing.TB, c *kubetest.C) (pods, policies int) {
	t.Helper()
	nps, err := c.Client.NetworkingV1().NetworkPolicies(c.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: kube.LabelKennel + "=1"})
	if err != nil {
		t.Fatal(err)
	}
	return len(kennelPods(t, c)), len(nps.Items)
}

// waitNoLeftovers waits up to 60 s for no kennel pod or policy to be left.
func waitNoLeftovers(t testing.TB, c *kubetest.C) {
	t.Helper()
	var pods, policies int
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if pods, policies = left(t, c); pods == 0 && policies == 0 {
			return
		}
	}
	t.Fatalf("left in the namespace: %d pods, %d network policies; want none", pods, policies)
}

// TestStartKillCycles: 20 kernels started and killed one after another leave no pod and
// no NetworkPolicy behind, each gone by the time Wait returns.
func TestStartKillCycles(t *testing.T) {
	c := kubetest.Cluster(t)
	waitNoLeftovers(t, c)
	tr := newTransport(t, kube.Options{})
	var starts, kills time.Duration
	defer func() { t.Logf("mean start to hello %v, kill to Wait %v", starts/20, kills/20) }()
	for i := range 20 {
		t0 := time.Now()
		k, cl := transporttest.Start(t, tr, transports.Spec{SessionID: fmt.Sprintf("cycle-%d", i), Dir: "/tmp"})
		starts += time.Since(t0)
		if i%2 == 1 {
			if _, err := cl.Run("x = 1"); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		t1 := time.Now()
		if err := k.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		if _, err := k.Wait(); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		kills += time.Since(t1)
		if pods, policies := left(t, c); pods != 0 || policies != 0 {
			t.Fatalf("cycle %d: %d pods, %d policies left once Wait returned", i, pods, policies)
		}
	}
}

// childController plays a controller that starts three kernels and is then killed with
// SIGKILL by the test: it prints each pod, then "ready", then blocks.
func childController() int {
	ctx := context.Background()
	cli, err := kube.Connect(ctx, kube.ConnectOptions{Kubeconfig: os.Getenv(kubeconfigEnv)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tr, err := kube.New(cli, kube.Options{Namespace: os.Getenv(namespaceEnv), MilliCPU: 100, Memory: 256 << 20})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var ks []transports.Kernel
	for i := range 3 {
		k, err := tr.Start(ctx, transports.Spec{SessionID: fmt.Sprintf("child-%d", i), Dir: "/tmp"})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		line, err := bufio.NewReader(k.Stdout()).ReadString('\n')
		if err != nil || !strings.Contains(line, `"hello"`) {
			fmt.Fprintln(os.Stderr, "no hello:", line, err)
			return 1
		}
		fmt.Println(k.Info().ID)
		ks = append(ks, k)
	}
	fmt.Println("ready")
	select {}
}

// TestKilledControllerLeavesNothing: a controller killed with SIGKILL leaves its pods (its
// kernels end with their exec streams, the pods' init lives on); the next controller's
// start-up sweep removes them and their NetworkPolicies, and a start of the next
// controller's works beside it.
func TestKilledControllerLeavesNothing(t *testing.T) {
	c := kubetest.Cluster(t)
	waitNoLeftovers(t, c)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=controller", kubeconfigEnv+"="+c.Kubeconfig, namespaceEnv+"="+c.Namespace)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var ids []string
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "ready" {
		ids = append(ids, sc.Text())
	}
	if len(ids) != 3 {
		_ = testproc.Kill(cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		t.Fatalf("the child controller started %q, want 3 kernels", ids)
	}
	if err := testproc.Kill(cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if pods, policies := left(t, c); pods != 3 || policies != 3 {
		t.Fatalf("after the controller's SIGKILL: %d pods, %d policies; want its 3 of each still there", pods, policies)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := kube.Sweep(ctx, client(t, c), kube.SweepOptions{Keep: func(string) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sweep: %+v", res)
	if len(res.Removed) != 3 || res.Policies != 3 {
		t.Errorf("sweep removed %q and %d policies, want the 3 pods %q and their policies", res.Removed, res.Policies, ids)
	}
	waitNoLeftovers(t, c)
}

// TestSweepKeepsTheLiving: a sweep by another live controller of this host keeps a
// running session's pod and policy; the owner's own sweep without Keep removes them.
func TestSweepKeepsTheLiving(t *testing.T) {
	c := kubetest.Cluster(t)
	waitNoLeftovers(t, c)
	tr := newTransport(t, kube.Options{})
	k, _ := transporttest.Start(t, tr, transports.Spec{SessionID: "living", Dir: "/tmp"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Another live controller: the parent process of the test binary.
	other, err := docker.Process(os.Getppid())
	if err != nil {
		t.Skip(err)
	}
	res, err := kube.Sweep(ctx, client(t, c), kube.SweepOptions{Self: other})
	if err != nil || len(res.Removed) != 0 || res.Kept != 1 {
		t.Fatalf("sweep by another live controller: %+v, %v; want the pod kept", res, err)
	}
	res, err = kube.Sweep(ctx, client(t, c), kube.SweepOptions{})
	// The policy goes with the pod: removed by the sweep, or, when the kernel's own end
	// (its pod deleted under it) came first, by the kernel's release; none is left either
	// way (waitNoLeftovers).
	if err != nil || len(res.Removed) != 1 || res.Policies > 1 {
		t.Fatalf("the owner's sweep keeping nothing: %+v, %v; want its pod and policy removed", res, err)
	}
	exit, err := k.Wait()
	t.Logf("the swept kernel: %+v, %v", exit, err)
	waitNoLeftovers(t, c)
}

// TestKernelOOM: a cell that allocates past the limit in the kernel itself ends the
// kernel by the memory limit: Exit.OOM, code 137, not Killed.
func TestKernelOOM(t *testing.T) {
	tr := newTransport(t, kube.Options{Memory: 128 << 20, TmpSize: 16 << 20})
	k, c := transporttest.Start(t, tr, transports.Spec{SessionID: "oom", Dir: "/tmp"})
	if _, err := c.Send("blocks = []\nwhile True:\n    blocks.append(bytearray(16 << 20))"); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	exit, err := k.Wait()
	t.Logf("Wait took %v", time.Since(t0))
	if err != nil {
		t.Fatal(err)
	}
	if !exit.OOM || exit.Killed || exit.Code != 137 {
		t.Errorf("a kernel past the memory limit: %+v, want OOM, code 137, not killed", exit)
	}
}

// TestImageMissing: an image the node lacks fails the start at once, naming the image and
// the command that makes it; nothing is left.
func TestImageMissing(t *testing.T) {
	c := kubetest.Cluster(t)
	waitNoLeftovers(t, c)
	const image = "docker.io/library/kennel-kernel:000000000000"
	tr := newTransport(t, kube.Options{Image: image})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := tr.Start(ctx, transports.Spec{SessionID: "missing", Dir: "/tmp"})
	if !errors.Is(err, kube.ErrImageMissing) || !errors.Is(err, transports.ErrUnavailable) ||
		!strings.Contains(err.Error(), image) || !strings.Contains(err.Error(), "kennel image build") {
		t.Fatalf("start with a missing image: %v, want ErrImageMissing naming %s and `kennel image build`", err, image)
	}
	t.Log(err)
	waitNoLeftovers(t, c)
}

// TestPendingTimeout: a pod the scheduler cannot place (more memory than the node has)
// fails the start at the deadline with the scheduler's reason; nothing is left.
func TestPendingTimeout(t *testing.T) {
	c := kubetest.Cluster(t)
	waitNoLeftovers(t, c)
	tr := newTransport(t, kube.Options{Memory: 1 << 50, PendingTimeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := tr.Start(ctx, transports.Spec{SessionID: "pending", Dir: "/tmp"})
	if !errors.Is(err, kube.ErrPending) || !strings.Contains(err.Error(), "Insufficient memory") {
		t.Fatalf("start of an unschedulable pod: %v, want ErrPending with the scheduler's reason", err)
	}
	t.Log(err)
	waitNoLeftovers(t, c)
}

// TestOwnerCollects: with Options.Owner, a kernel's pod and NetworkPolicy belong to that
// object, and the cluster's garbage collector deletes them once it is deleted (as a
// controller's own pod would be, rescheduled elsewhere).
func TestOwnerCollects(t *testing.T) {
	c := kubetest.Cluster(t)
	waitNoLeftovers(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cm, err := c.Client.CoreV1().ConfigMaps(c.Namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "kennel-owner-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr := newTransport(t, kube.Options{Owner: &metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID}})
	k, _ := transporttest.Start(t, tr, transports.Spec{SessionID: "owned", Dir: "/tmp"})
	if pods, policies := left(t, c); pods != 1 || policies != 1 {
		t.Fatalf("%d pods, %d policies; want the kernel's", pods, policies)
	}
	if err := c.Client.CoreV1().ConfigMaps(c.Namespace).Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	exit, err := k.Wait()
	t.Logf("the kernel once its owner was deleted: %+v, %v", exit, err)
	waitNoLeftovers(t, c)
}
