package launch

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/sessionspec"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/kubernetes/kubetest"
)

func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }

// TestKubernetesSessionsFromTheirDescription: a session described as kubernetes runs
// its cells in a pod of the real test cluster. Without a pathMap it shares no files
// with the controller and fs.* answers unavailable, saying what to give; with a pathMap
// on the controller's own node its directory is a hostPath volume, the kernel's files
// are the host's and fs.* serves them through the path map.
func TestKubernetesSessionsFromTheirDescription(t *testing.T) {
	c := kubetest.Cluster(t)
	kit := New(Options{})
	t.Cleanup(func() { _ = kit.Close() })
	start := func(t *testing.T, spec *sessionspec.Transport, dir string) *controller.Session {
		s, p := startAssembled(t, kit, spec, dir)
		if p.Kind != sessionspec.KindKubernetes || p.Transport.Name() != "kubernetes" {
			t.Fatalf("parts %+v", p)
		}
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("no files shared", func(t *testing.T) {
		s := start(t, &sessionspec.Transport{Kubernetes: &sessionspec.Kubernetes{Kubeconfig: c.Kubeconfig, Namespace: c.Namespace, Image: c.Image}}, t.TempDir())
		res, err := s.Execute(ctx, "import os, kennel\ntry:\n    kennel.fs.read('x')\n    r = 'read'\nexcept kennel.HostError as e:\n    r = e.code + ' ' + e.message\n(os.getcwd(), r)", nil)
		if err != nil || res.Status != "ok" || res.Result == nil {
			t.Fatalf("cell: %+v, %v", res, err)
		}
		if out := *res.Result; !strings.HasPrefix(out, "('/tmp', ") || !strings.Contains(out, "unavailable the kernel's pod shares no files") || !strings.Contains(out, "pathMap") || !strings.Contains(out, "kubernetes.node") {
			t.Fatalf("cwd and fs.read without shared files: %s; want /tmp and unavailable, naming pathMap and kubernetes.node", out)
		}
	})

	t.Run("a hostPath on the controller's node", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Chown(dir, 4242, 4343); err != nil {
			t.Fatal(err)
		}
		spec := &sessionspec.Transport{
			Kubernetes: &sessionspec.Kubernetes{Kubeconfig: c.Kubeconfig, Namespace: c.Namespace, Image: c.Image, Node: c.Node},
			PathMap:    []pathmap.Mount{{Sandbox: "/work", Host: dir}},
		}
		s := start(t, spec, dir)
		res, err := s.Execute(ctx, "import os, kennel\nopen('/work/own.txt', 'w').write('from the pod')\nkennel.fs.write('/work/by-host.txt', 'from the host')\n(os.getcwd(), kennel.fs.read('/work/own.txt'), os.getuid())", nil)
		if err != nil || res.Status != "ok" || res.Result == nil {
			t.Fatalf("cell: %+v, %v", res, err)
		}
		if !strings.Contains(*res.Result, "'/work'") || !strings.Contains(*res.Result, "from the pod") || !strings.Contains(*res.Result, "4242") {
			t.Fatalf("result %s: want cwd /work, the pod's file read through the path map, uid 4242", *res.Result)
		}
		got, err := os.ReadFile(filepath.Join(dir, "by-host.txt"))
		if err != nil || string(got) != "from the host" {
			t.Fatalf("the file fs.write made: %q, %v", got, err)
		}
		if got, err := os.ReadFile(filepath.Join(dir, "own.txt")); err != nil || string(got) != "from the pod" {
			t.Fatalf("the file the pod wrote, on the host: %q, %v", got, err)
		}
	})
}

// TestAKitHandsOutPooledKubernetesKernels: a Kit keeping a Kubernetes pool of one (the
// default kubeconfig, its node found as this machine's: kubernetes.LocalNode) hands a
// session of the default description on that node its ready kernel, which works in the
// session's own directory, mounted at hand-out; its figures are the Kit's.
func TestAKitHandsOutPooledKubernetesKernels(t *testing.T) {
	c := kubetest.Cluster(t)
	testneed.Root(t) // a pool mounts a session's directories into its pods' containers
	t.Setenv("KUBECONFIG", c.Kubeconfig)
	kit := New(Options{RunDir: filepath.Join(t.TempDir(), "run"), Pools: Pools{
		Kubernetes: 1, KubernetesRuntime: "unix://" + filepath.Join(c.Dir, "containerd", "containerd.sock"),
	}})
	t.Cleanup(func() { _ = kit.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := kit.StartPools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for st := kit.PoolStats(); len(st) != 1 || st[0].Kind != "kubernetes" || st[0].Ready != 1; st = kit.PoolStats() {
		if ctx.Err() != nil {
			t.Fatalf("the pool did not fill: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "mine.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := &sessionspec.Transport{
		Kubernetes: &sessionspec.Kubernetes{Node: c.Node},
		PathMap:    []pathmap.Mount{{Sandbox: "/work", Host: dir}},
	}
	s, _ := startAssembled(t, kit, spec, dir)
	if _, info, ok := s.Kernel(); !ok || info.Pool != transports.PoolHit {
		t.Errorf("a session of the pool's description: pool %q, want hit", info.Pool)
	}
	res, err := s.Execute(ctx, "import os\n(open('mine.txt').read(), os.getcwd())", nil)
	if err != nil || res.Status != "ok" || res.Result == nil || *res.Result != "('mine', '/work')" {
		t.Fatalf("the pooled kernel in its session's directory: %+v, %v", res, err)
	}
	if st := kit.PoolStats(); st[0].Hits != 1 || st[0].Failures != 0 {
		t.Errorf("pool figures %+v", st[0])
	}
}
