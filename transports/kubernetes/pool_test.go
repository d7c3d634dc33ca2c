package kubernetes_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/transports"
	kube "github.com/kennel-dev/kennel/transports/kubernetes"
	"github.com/kennel-dev/kennel/transports/kubernetes/kubetest"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// runtimeOf is the CRI endpoint of the test cluster's node.
func runtimeOf(c *kubetest.C) string {
	return "unix://" + filepath.Join(c.Dir, "containerd", "containerd.sock")
}

// poolOptions is the description of the test pools' kernels: detached, on the cluster's
// node, nobody's, with the test transports' graces (newTransport) and small requests (the
// node has two CPUs for a pool's pods, the sessions' and the cold ones beside them).
func poolOptions(c *kubetest.C) kube.Options {
	return kube.Options{Detached: true, Node: c.Node, User: "65534:65534", StdinGrace: time.Second, StopGrace: time.Second,
		MilliCPU: 200, Memory: 256 << 20}
}

// newPool starts a pool of size kernels of o's description on the test cluster over cli
// (the client of the transports it serves), closed when the test ends, and waits until
// it is full.
func newPool(t testing.TB, c *kubetest.C, cli *kube.Client, o kube.Options, size int) *kube.Pool {
	t.Helper()
	testneed.Root(t) // a pool mounts a session's directories into its pods' containers
	p, err := kube.NewPool(context.Background(), cli, kube.PoolOptions{Size: size, Kernel: o, Runtime: runtimeOf(c), Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	return transporttest.KeepPool(t, p, err, size)
}

// poolPods lists the pods of pools in the test namespace.
func poolPods(t *testing.T, c *kubetest.C) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.Client.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelPool + "=1"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range l.Items {
		names = append(names, p.Name)
	}
	return names
}

// TestAPooledKernelKeepsNothingOfTheOneBefore: the pool's isolation test
// (transporttest.PooledKernelKeepsNothing) on pods: the session's directories, mounted
// into a running pod's container at hand-out, are its own, read-only where its mount is;
// and the pod carries the session's label once handed out.
func TestAPooledKernelKeepsNothingOfTheOneBefore(t *testing.T) {
	c := kubetest.Cluster(t)
	cli := client(t, c)
	o := poolOptions(c)
	pool := newPool(t, c, cli, o, 1)
	kb, _, _ := transporttest.PooledKernelKeepsNothing(t, pool, transporttest.StartFor(func(t *testing.T, mounts []pathmap.Mount, pooled bool) transports.Transport {
		o := o
		o.Mounts = mounts
		if pooled {
			o.Pool = pool
		}
		return newTransportOn(t, cli, o)
	}))
	where, _, _ := strings.Cut(kb.Info().ID, ":") // "namespace/pod:run directory"
	_, pod, _ := strings.Cut(where, "/")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := c.Client.CoreV1().Pods(c.Namespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Labels[kube.LabelPool] != "1" || p.Annotations[kube.AnnotationSession] != "pool-b" || p.Labels[kube.LabelSession] != "pool-b" {
		t.Errorf("B's pod: labels %v, annotations %v; want the pool's mark and B's session", p.Labels, p.Annotations)
	}
}

// TestDetachedConformancePooled: kernels a pool hands out pass the suite every transport
// passes (one pool for every case; a case that finds it empty starts cold).
func TestDetachedConformancePooled(t *testing.T) {
	c := kubetest.Cluster(t)
	cli := client(t, c)
	o := poolOptions(c)
	o.Pool = newPool(t, c, cli, poolOptions(c), 2)
	transporttest.Run(t, func(t *testing.T) transports.Transport {
		return newTransportOn(t, cli, o)
	}, transporttest.WithSpec(func(t *testing.T, s *transports.Spec) {
		s.Dir = "/tmp"
	}), transporttest.WithTimeout(60*time.Second))
	if s := o.Pool.Stats(); s.Hits < 2 || s.Failures != 0 {
		t.Errorf("the pool handed out %+v: the suite ran on cold starts", s)
	}
}

// TestAHandOutLostAfterItsStartBlockStartsCold: a session whose working directory the
// image lacks loses its pooled kernel after the start block (the kernel cannot enter it
// and ends); the pool removes it, counts a failure, and the session's start goes cold.
// On a pod that cold start is refused too (a pod's kernel is an exec that enters its
// working directory itself; no runtime makes it), so the error is the cold start's.
func TestAHandOutLostAfterItsStartBlockStartsCold(t *testing.T) {
	c := kubetest.Cluster(t)
	cli := client(t, c)
	o := poolOptions(c)
	pool := newPool(t, c, cli, o, 1)
	o.Pool = pool
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k, err := newTransportOn(t, cli, o).Start(ctx, transports.Spec{SessionID: "lost", Dir: "/kennel-not-in-the-image"})
	if err == nil {
		transporttest.Stop(t, k)
		t.Fatal("a kernel started in a working directory the image lacks")
	}
	if !errdefs.IsUnavailable(err) || strings.Contains(err.Error(), "hand out pooled kernel") {
		t.Errorf("start: %v; want the cold start's refusal (errdefs.ErrUnavailable)", err)
	}
	if s := pool.Stats(); s.Failures != 1 || s.Hits != 0 || s.Misses != 1 {
		t.Errorf("after a hand-out lost after its start block: %+v", s)
	}
	transporttest.WaitReady(t, pool, 1)
}

// TestPoolMissesAndReplaces: a session of another description starts cold and says so;
// a ready kernel whose pod is deleted is replaced; Close leaves no pool pod.
func TestPoolMissesAndReplaces(t *testing.T) {
	c := kubetest.Cluster(t)
	testneed.Root(t)
	cli := client(t, c)
	o := poolOptions(c)
	p, err := kube.NewPool(context.Background(), cli, kube.PoolOptions{Size: 1, Kernel: o, Runtime: runtimeOf(c)})
	if err != nil {
		t.Fatal(err)
	}
	transporttest.WaitReady(t, p, 1)

	other := o
	other.Pool = p
	other.Memory = 512 << 20
	k, cl := transporttest.Start(t, newTransportOn(t, cli, other), transports.Spec{SessionID: "miss", Dir: "/tmp"})
	if k.Info().Pool != transports.PoolMiss {
		t.Errorf("another description's kernel: pool %q, want %q", k.Info().Pool, transports.PoolMiss)
	}
	if out, err := cl.Run("print(6 * 7)"); err != nil || out != "42\n" {
		t.Errorf("a cell: %q, %v", out, err)
	}
	if s := p.Stats(); s.Misses != 1 || s.Hits != 0 || s.Ready != 1 {
		t.Errorf("after a miss: %+v", s)
	}

	pods := poolPods(t, c)
	if len(pods) != 1 {
		t.Fatalf("pool pods %v, want one", pods)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Client.CoreV1().Pods(c.Namespace).Delete(ctx, pods[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for s := p.Stats(); s.Refills < 2 || s.Ready < 1; s = p.Stats() {
		if ctx.Err() != nil {
			t.Fatalf("a deleted ready kernel's pod was not replaced: %+v", s)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for pods := poolPods(t, c); len(pods) > 0; pods = poolPods(t, c) {
		if ctx.Err() != nil {
			t.Fatalf("pool pods %v left after Close", pods)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestNewPoolRefuses: a pool needs detached kernels on a named node with no mounts of
// their own, a CRI endpoint, and a runtime that answers there; each refusal names its
// field or says what is unavailable, and nothing starts.
func TestNewPoolRefuses(t *testing.T) {
	cli, err := kube.NewClient(&rest.Config{Host: "https://127.0.0.1:1"}, "kennel")
	if err != nil {
		t.Fatal(err)
	}
	good := kube.Options{Detached: true, Node: "node-a", User: "65534:65534"}
	for _, tc := range []struct {
		name    string
		mutate  func(*kube.PoolOptions)
		field   string
		unavail bool
	}{
		{"size", func(p *kube.PoolOptions) { p.Size = 0 }, "PoolOptions.Size", false},
		{"attached", func(p *kube.PoolOptions) { p.Kernel.Detached = false }, "PoolOptions.Kernel.RunDir", false},
		{"mounts", func(p *kube.PoolOptions) {
			p.Kernel.Mounts = []pathmap.Mount{{Host: "/srv", Sandbox: "/work"}}
		}, "PoolOptions.Kernel.Mounts", false},
		{"claims", func(p *kube.PoolOptions) { p.Kernel.Claims = []kube.Claim{{Name: "c", Sandbox: "/data"}} }, "PoolOptions.Kernel.Mounts", false},
		{"node", func(p *kube.PoolOptions) { p.Kernel.Node = "" }, "PoolOptions.Kernel.Node", false},
		{"runtime", func(p *kube.PoolOptions) { p.Runtime = "" }, "PoolOptions.Runtime", false},
		{"no runtime there", func(p *kube.PoolOptions) { p.Runtime = "unix://" + filepath.Join(t.TempDir(), "none.sock") }, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			po := kube.PoolOptions{Size: 1, Kernel: good, Runtime: "unix:///run/none.sock"}
			tc.mutate(&po)
			p, err := kube.NewPool(context.Background(), cli, po)
			if err == nil {
				_ = p.Close(context.Background())
				t.Fatal("no refusal")
			}
			var fe *transports.FieldError
			switch {
			case tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field):
				t.Errorf("%v: want a refusal of %s", err, tc.field)
			case tc.unavail && !errdefs.IsUnavailable(err) && os.Geteuid() == 0:
				t.Errorf("%v: want unavailable", err)
			}
		})
	}
}

// BenchmarkPoolHandOutVsColdStart: the Kubernetes pool's hand-out (a session's directory
// mounted at /work) beside a cold detached start of the same description (a pod made,
// scheduled and run, then the kernel's exec).
//
//	go test -run '^$' -bench PoolHandOutVsColdStart -benchtime 10x -count 3 ./transports/kubernetes/
func BenchmarkPoolHandOutVsColdStart(b *testing.B) {
	c := kubetest.Cluster(b)
	cli := client(b, c)
	o := poolOptions(c)
	pool := newPool(b, c, cli, o, 1)
	dir := b.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		b.Fatal(err)
	}
	pooled, cold := o, o
	pooled.Pool = pool
	pooled.Mounts = []pathmap.Mount{{Host: dir, Sandbox: "/work"}}
	cold.Mounts = pooled.Mounts
	transporttest.BenchHandOut(b, newTransportOn(b, cli, pooled), newTransportOn(b, cli, cold),
		transports.Spec{SessionID: "bench", Dir: "/work"}, func() { transporttest.WaitReady(b, pool, 1) })
}
