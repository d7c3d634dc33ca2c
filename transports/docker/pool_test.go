package docker_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// newPool starts a pool of size kernels of o's description (o.RunDir set), closed when
// the test ends, and waits until it is full.
func newPool(t testing.TB, cli client.APIClient, o docker.Options, size int) *docker.Pool {
	t.Helper()
	testneed.Root(t) // a pool mounts a session's directories into its containers
	p, err := docker.NewPool(cli, docker.PoolOptions{Size: size, Kernel: o})
	return transporttest.KeepPool(t, p, err, size)
}

// TestDetachedConformancePooled: kernels a pool hands out pass the suite every transport
// passes, as kernels started cold do (the transports of one case share their run
// directory root and their pool).
func TestDetachedConformancePooled(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	roots := map[string]docker.Options{}
	var hits uint64
	transporttest.Run(t, func(t *testing.T) transports.Transport {
		o, ok := roots[t.Name()]
		if !ok {
			o = detachedOptions(t)
			o.Pool = newPool(t, cli, o, 2)
			roots[t.Name()] = o
			t.Cleanup(func() { hits += o.Pool.Stats().Hits })
		}
		return newTransport(t, cli, o)
	}, transporttest.WithSpec(func(t *testing.T, s *transports.Spec) {
		s.Dir = "/tmp"
	}), transporttest.WithTimeout(30*time.Second))
	if hits < uint64(len(roots)/2) {
		t.Errorf("the pools of %d cases handed out %d kernels: the suite ran on cold starts", len(roots), hits)
	}
}

// startPooled starts a kernel of o's for spec and reads its hello; it is killed when the
// test ends.
func startPooled(t *testing.T, cli client.APIClient, o docker.Options, spec transports.Spec) (transports.Kernel, *transporttest.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k, err := newTransport(t, cli, o).Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Kill(context.Background()) })
	c := transporttest.NewClient(k)
	if _, err := c.Hello(); err != nil {
		t.Fatal(err)
	}
	return k, c
}

// probe is what a kernel shows of itself in TestAPooledKernelKeepsNothingOfTheOneBefore.
type probe struct {
	Left     bool              `json:"left"`
	Variable bool              `json:"variable"`
	Env      map[string]string `json:"env"`
	Work     []string          `json:"work"`
	Cwd      string            `json:"cwd"`
	ReadOnly string            `json:"readonly"`
}

const probeCell = `
import json, os
try:
    open('/ref/x', 'w')
    ro = 'writable'
except OSError as e:
    ro = e.strerror
print(json.dumps({"left": os.path.exists('/tmp/left'), "variable": 'leftover' in globals(),
    "env": dict(os.environ), "work": sorted(os.listdir('/work')), "cwd": os.getcwd(), "readonly": ro}))
`

func runProbe(t *testing.T, c *transporttest.Client) probe {
	t.Helper()
	out, err := c.Run(probeCell)
	if err != nil {
		t.Fatal(err)
	}
	var p probe
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("probe: %v in %q", err, out)
	}
	return p
}

// TestAPooledKernelKeepsNothingOfTheOneBefore: a pool of one hands a kernel to session A,
// which leaves a file in /tmp, a variable and its environment; once A has ended and the
// pool is full again, session B's kernel, also the pool's, sees none of it: its own
// environment (the same keys a kernel started cold gets), its own directory at /work
// (not A's), its read-only mount read-only, and a container of its own.
func TestAPooledKernelKeepsNothingOfTheOneBefore(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	o := detachedOptions(t)
	o.User = "65534:65534"
	pool := newPool(t, cli, o, 1)
	o.Pool = pool
	dirA, dirB, ref := t.TempDir(), t.TempDir(), t.TempDir()
	for _, d := range []string{dirA, dirB, ref} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dirB, "b.txt"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}

	oa := o
	oa.Mounts = []pathmap.Mount{{Host: dirA, Sandbox: "/work"}, {Host: ref, Sandbox: "/ref"}}
	ka, ca := startPooled(t, cli, oa, transports.Spec{SessionID: "pool-a", Dir: "/work", Env: []string{"SECRET_A=a1"}})
	if got := ka.Info().Pool; got != docker.PoolHit {
		t.Fatalf("A's kernel: pool %q, want %q", got, docker.PoolHit)
	}
	if _, err := ca.Run("open('/tmp/left', 'w').write('x'); leftover = 42; open('/work/from-a', 'w').write('a')"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dirA, "from-a")); err != nil || string(b) != "a" {
		t.Fatalf("A's write into its mount: %q, %v", b, err)
	}
	pa := runProbe(t, ca)
	if !pa.Left || !pa.Variable || pa.Env["SECRET_A"] != "a1" || pa.Cwd != "/work" || pa.ReadOnly != "writable" {
		t.Fatalf("A sees itself as %+v", pa)
	}
	transporttest.Stop(t, ka)
	transporttest.WaitReady(t, pool, 1)

	ob := o
	ob.Mounts = []pathmap.Mount{{Host: dirB, Sandbox: "/work"}, {Host: ref, Sandbox: "/ref", ReadOnly: true}}
	kb, cb := startPooled(t, cli, ob, transports.Spec{SessionID: "pool-b", Dir: "/work", Env: []string{"SECRET_B=b1"}})
	if got := kb.Info().Pool; got != docker.PoolHit {
		t.Fatalf("B's kernel: pool %q, want %q", got, docker.PoolHit)
	}
	if kb.Info().ID == ka.Info().ID {
		t.Fatalf("B's kernel runs in A's container %.12s", ka.Info().ID)
	}
	pb := runProbe(t, cb)
	if pb.Left || pb.Variable {
		t.Errorf("B sees A's file in /tmp (%v) or A's variable (%v)", pb.Left, pb.Variable)
	}
	if _, ok := pb.Env["SECRET_A"]; ok || pb.Env["SECRET_B"] != "b1" {
		t.Errorf("B's environment: SECRET_A %q, SECRET_B %q", pb.Env["SECRET_A"], pb.Env["SECRET_B"])
	}
	for k := range pb.Env {
		if strings.HasPrefix(k, "KENNEL_KERNEL_POOL") || k == "KENNEL_KERNEL_RUN" {
			t.Errorf("B's environment holds the pool's %s", k)
		}
	}
	if !slices.Equal(pb.Work, []string{"b.txt"}) || pb.Cwd != "/work" {
		t.Errorf("B's /work: %v (cwd %q), want its own directory's [b.txt]", pb.Work, pb.Cwd)
	}
	if pb.ReadOnly != "Read-only file system" {
		t.Errorf("B's read-only mount: a write gave %q", pb.ReadOnly)
	}
	if _, err := cb.Run("open('/work/from-b', 'w').write('b')"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dirA, "from-b")); err == nil {
		t.Error("B's write landed in A's directory")
	}
	if b, err := os.ReadFile(filepath.Join(dirB, "from-b")); err != nil || string(b) != "b" {
		t.Errorf("B's write into its mount: %q, %v", b, err)
	}

	// The same keys as a kernel started cold for the same session.
	cold := o
	cold.Pool = nil
	cold.Mounts = ob.Mounts
	_, cc := startPooled(t, cli, cold, transports.Spec{SessionID: "pool-cold", Dir: "/work", Env: []string{"SECRET_B=b1"}})
	pc := runProbe(t, cc)
	if got, want := keys(pb.Env), keys(pc.Env); !slices.Equal(got, want) {
		t.Errorf("a pooled kernel's environment has keys %v, a cold one's %v", got, want)
	}
	if got := pb.Env["HOSTNAME"]; got != kb.Info().ID[:12] {
		t.Errorf("a pooled kernel's HOSTNAME %q, want its container's %.12s", got, kb.Info().ID)
	}
	for _, k := range []string{"PATH", "HOME", "LANG", "SECRET_B"} {
		if pb.Env[k] != pc.Env[k] {
			t.Errorf("%s: pooled %q, cold %q", k, pb.Env[k], pc.Env[k])
		}
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestAPoolMissStartsCold: a session of another description than the pool's (another
// memory limit), or one that comes when the pool is empty, gets a kernel started cold
// and told so; the pool counts hits and misses.
func TestAPoolMissStartsCold(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	o := detachedOptions(t)
	o.User = "65534:65534"
	pool := newPool(t, cli, o, 1)
	o.Pool = pool

	other := o
	other.Memory = 512 << 20
	k, c := startPooled(t, cli, other, transports.Spec{SessionID: "miss-desc", Dir: "/tmp"})
	if got := k.Info().Pool; got != docker.PoolMiss {
		t.Errorf("another description: pool %q, want %q", got, docker.PoolMiss)
	}
	if _, err := c.Run("x = 1"); err != nil {
		t.Fatal(err)
	}
	if s := pool.Stats(); s.Hits != 0 || s.Misses != 1 || s.Ready != 1 {
		t.Errorf("after a miss of another description: %+v", s)
	}

	k1, _ := startPooled(t, cli, o, transports.Spec{SessionID: "hit", Dir: "/tmp"})
	k2, _ := startPooled(t, cli, o, transports.Spec{SessionID: "miss-empty", Dir: "/tmp"})
	if k1.Info().Pool != docker.PoolHit {
		t.Errorf("the first of two: pool %q, want %q", k1.Info().Pool, docker.PoolHit)
	}
	// The second comes as the pool refills: a hit or a miss, whichever, told as counted.
	hits := uint64(1)
	switch k2.Info().Pool {
	case docker.PoolHit:
		hits = 2
	case docker.PoolMiss:
	default:
		t.Errorf("the second of two: pool %q, want hit or miss", k2.Info().Pool)
	}
	if s := pool.Stats(); s.Hits != hits || s.Misses != 3-hits || s.Failures != 0 {
		t.Errorf("after three starts (the second of two a %q): %+v", k2.Info().Pool, s)
	}
	// Without a pool, no word.
	plain := o
	plain.Pool = nil
	if k, _ := startPooled(t, cli, plain, transports.Spec{SessionID: "no-pool", Dir: "/tmp"}); k.Info().Pool != "" {
		t.Errorf("a transport without a pool: pool %q", k.Info().Pool)
	}
}

// TestAHandOutThatCannotMountStartsCold: a session whose mount target passes through a
// symlink of the image (/var/run is /run in Debian's) is never mounted through it in a
// pooled container: that kernel is removed, counted as a failure, and the session gets a
// kernel started cold, whose engine resolves the path as it always does.
func TestAHandOutThatCannotMountStartsCold(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	o := detachedOptions(t)
	o.User = "65534:65534"
	pool := newPool(t, cli, o, 1)
	o.Pool = pool
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("here"), 0o644); err != nil {
		t.Fatal(err)
	}
	o.Mounts = []pathmap.Mount{{Host: dir, Sandbox: "/var/run/work"}}
	k, c := startPooled(t, cli, o, transports.Spec{SessionID: "symlinked", Dir: "/tmp"})
	if got := k.Info().Pool; got != docker.PoolMiss {
		t.Errorf("a hand-out through a symlink: pool %q, want %q", got, docker.PoolMiss)
	}
	out, err := c.Run("print(open('/run/work/f').read())")
	if err != nil || strings.TrimSpace(out) != "here" {
		t.Errorf("the cold kernel's mount: %q, %v", out, err)
	}
	if s := pool.Stats(); s.Failures != 1 || s.Hits != 0 || s.Misses != 1 {
		t.Errorf("after a failed hand-out: %+v", s)
	}
	transporttest.WaitReady(t, pool, 1)
}

// TestAPoolReplacesAKernelThatEndsAndLeavesNothingWhenClosed: a sweep of the pool's
// owner keeps its ready kernels; a ready kernel whose container is killed is dropped and
// replaced; Close removes every ready kernel's container and run directory.
func TestAPoolReplacesAKernelThatEndsAndLeavesNothingWhenClosed(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	o := detachedOptions(t)
	o.User = "65534:65534"
	o.DetachedOwner = "pool-test-" + filepath.Base(filepath.Dir(o.RunDir))
	testneed.Root(t)
	p, err := docker.NewPool(cli, docker.PoolOptions{Size: 2, Kernel: o})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close(context.Background()) }()
	transporttest.WaitReady(t, p, 2)
	ctx := context.Background()
	pooled := func() []string {
		list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", docker.LabelDetachedOwner+"="+o.DetachedOwner).Add("label", docker.LabelPool+"="+p.Instance())})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range list.Items {
			ids = append(ids, c.ID)
		}
		return ids
	}
	ids := pooled()
	if len(ids) != 2 {
		t.Fatalf("%d pooled containers, want 2", len(ids))
	}
	// A sweep of the pool's owner keeps the live pool's kernels (no record holds them).
	res, err := docker.Sweep(ctx, cli, docker.SweepOptions{Keep: func(string) bool { return true }, Owner: o.DetachedOwner, Held: func(string) bool { return false }, Pool: p.Instance()})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range res.Removed {
		if slices.Contains(ids, id) {
			t.Fatalf("a sweep removed the live pool's container %.12s", id)
		}
	}
	if _, err := cli.ContainerKill(ctx, ids[0], client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for s := p.Stats(); s.Refills < 3 || s.Ready < 2; s = p.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("a killed ready kernel was not replaced: %+v", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range pooled() {
		if _, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
			t.Errorf("container %.12s left after Close (%v)", id, err)
		}
	}
	if left, _ := os.ReadDir(o.RunDir); len(left) != 0 {
		t.Errorf("run directories left after Close: %v", left)
	}
}

// TestNewPoolRefuses: what a pool cannot serve is refused before anything starts.
func TestNewPoolRefuses(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	ok := detachedOptions(t)
	for name, o := range map[string]docker.PoolOptions{
		"no size":   {Size: 0, Kernel: ok},
		"attached":  {Size: 1, Kernel: docker.Options{}},
		"exec mode": {Size: 1, Kernel: func() docker.Options { o := ok; o.Container = "box"; return o }()},
		"mounts":    {Size: 1, Kernel: func() docker.Options { o := ok; o.Mounts = []pathmap.Mount{{Host: "/tmp", Sandbox: "/tmp"}}; return o }()},
		"gvisor":    {Size: 1, Kernel: func() docker.Options { o := ok; o.Runtime = "runsc"; return o }()},
		"user name": {Size: 1, Kernel: func() docker.Options { o := ok; o.User = "nobody"; return o }()},
	} {
		if p, err := docker.NewPool(cli, o); err == nil {
			_ = p.Close(context.Background())
			t.Errorf("%s: a pool of %+v was made", name, o)
		} else if !cerrdefs.IsInvalidArgument(err) && !cerrdefs.IsUnavailable(err) {
			t.Errorf("%s: %v, want invalid or unavailable", name, err)
		}
	}
}

// BenchmarkPoolHandOutVsColdStart is issue 20's item 3: Start to the hello of a kernel a
// pool hands out (a session's directory mounted at /work at hand-out) beside a cold
// detached start of the same description (transporttest.BenchHandOut); the target is a
// hand-out median of at most 20 ms.
//
//	go test -run '^$' -bench PoolHandOutVsColdStart -benchtime 20x -count 3 ./transports/docker/
func BenchmarkPoolHandOutVsColdStart(b *testing.B) {
	cli := dockerneed.KernelEngine(b)
	o := detachedOptions(b)
	o.User = "65534:65534"
	pool := newPool(b, cli, o, 1)
	pooled, cold := o, o
	pooled.Pool = pool
	pooled.Mounts = []pathmap.Mount{{Host: b.TempDir(), Sandbox: "/work"}}
	cold.Mounts = pooled.Mounts
	transporttest.BenchHandOut(b, newTransport(b, cli, pooled), newTransport(b, cli, cold),
		transports.Spec{SessionID: "bench", Dir: "/work"}, func() { transporttest.WaitReady(b, pool, 1) })
}
