package containerd_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/transports"
	ctrd "github.com/kennel-dev/kennel/transports/containerd"
	"github.com/kennel-dev/kennel/transports/containerd/containerdtest"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// newPool starts a pool of size kernels of o's description, closed when the test ends,
// and waits until it is full.
func newPool(t testing.TB, cli *client.Client, o ctrd.Options, size int) *ctrd.Pool {
	t.Helper()
	testneed.Root(t) // a pool mounts a session's directories into its containers
	p, err := ctrd.NewPool(cli, ctrd.PoolOptions{Size: size, Kernel: o, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	return transporttest.KeepPool(t, p, err, size)
}

// TestDetachedConformancePooled: kernels a pool hands out pass the suite every transport
// passes (the transports of one case share their run directory root and their pool).
func TestDetachedConformancePooled(t *testing.T) {
	d := containerdtest.Daemon(t)
	opts := map[string]ctrd.Options{}
	var hits uint64
	transporttest.Run(t, func(t *testing.T) transports.Transport {
		o, ok := opts[t.Name()]
		if !ok {
			o = ctrd.Options{RunDir: filepath.Join(t.TempDir(), "run"), User: "65534:65534"}
			o.Pool = newPool(t, d.Client, o, 2)
			opts[t.Name()] = o
			t.Cleanup(func() { hits += o.Pool.Stats().Hits })
		}
		return newTransport(t, d.Client, o)
	}, transporttest.WithSpec(func(t *testing.T, s *transports.Spec) {
		s.Dir = "/tmp"
	}), transporttest.WithTimeout(30*time.Second))
	if hits < uint64(len(opts)/2) {
		t.Errorf("the pools of %d cases handed out %d kernels: the suite ran on cold starts", len(opts), hits)
	}
}

// TestAPooledKernelKeepsNothingOfTheOneBefore: a pool of one hands a kernel to session A,
// which leaves a file in /tmp, a variable and its environment; session B's kernel, the
// pool's next, sees none of it: its own environment (the keys and values of a kernel
// started cold for it, but the run directory's), its own directory at /work, its
// read-only mount read-only.
func TestAPooledKernelKeepsNothingOfTheOneBefore(t *testing.T) {
	d := containerdtest.Daemon(t)
	o := ctrd.Options{RunDir: filepath.Join(t.TempDir(), "run"), User: "65534:65534"}
	pool := newPool(t, d.Client, o, 1)
	dirA, dirB, ref := t.TempDir(), t.TempDir(), t.TempDir()
	for _, dir := range []string{dirA, dirB, ref} {
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dirB, "b.txt"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := func(o ctrd.Options, mounts []pathmap.Mount, env string) (transports.Kernel, *transporttest.Client) {
		t.Helper()
		o.Mounts = mounts
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		k, err := newTransport(t, d.Client, o).Start(ctx, transports.Spec{SessionID: "pool", Dir: "/work", Env: []string{env}})
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
	type probe struct {
		Left, Variable bool
		Env            map[string]string
		Work           []string
		ReadOnly       string
	}
	look := func(c *transporttest.Client) probe {
		t.Helper()
		out, err := c.Run(`
import json, os
try:
    open('/ref/x', 'w'); ro = 'writable'
except OSError as e:
    ro = e.strerror
print(json.dumps({"Left": os.path.exists('/tmp/left'), "Variable": 'leftover' in globals(), "Env": dict(os.environ), "Work": sorted(os.listdir('/work')), "ReadOnly": ro}))`)
		if err != nil {
			t.Fatal(err)
		}
		var p probe
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatalf("%v in %q", err, out)
		}
		return p
	}
	pooled := o
	pooled.Pool = pool
	ka, ca := start(pooled, []pathmap.Mount{{Host: dirA, Sandbox: "/work"}, {Host: ref, Sandbox: "/ref"}}, "SECRET_A=a1")
	if ka.Info().Pool != transports.PoolHit {
		t.Fatalf("A: pool %q", ka.Info().Pool)
	}
	if _, err := ca.Run("open('/tmp/left', 'w').write('x'); leftover = 1; open('/work/from-a', 'w').write('a')"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dirA, "from-a")); err != nil || string(b) != "a" {
		t.Fatalf("A's write into its mount: %q, %v", b, err)
	}
	transporttest.Stop(t, ka)
	transporttest.WaitReady(t, pool, 1)

	mountsB := []pathmap.Mount{{Host: dirB, Sandbox: "/work"}, {Host: ref, Sandbox: "/ref", ReadOnly: true}}
	kb, cb := start(pooled, mountsB, "SECRET_B=b1")
	if kb.Info().Pool != transports.PoolHit {
		t.Fatalf("B: pool %q", kb.Info().Pool)
	}
	pb := look(cb)
	if pb.Left || pb.Variable || pb.Env["SECRET_A"] != "" || pb.Env["SECRET_B"] != "b1" {
		t.Errorf("B sees A's file %v, variable %v, or environment %v", pb.Left, pb.Variable, pb.Env)
	}
	if !slices.Equal(pb.Work, []string{"b.txt"}) || pb.ReadOnly != "Read-only file system" {
		t.Errorf("B's /work %v, its read-only mount's write: %q", pb.Work, pb.ReadOnly)
	}
	_, cc := start(o, mountsB, "SECRET_B=b1")
	pc := look(cc)
	delete(pc.Env, "KENNEL_KERNEL_RUN")
	delete(pb.Env, "KENNEL_KERNEL_RUN")
	pcj, _ := json.Marshal(pc.Env)
	pbj, _ := json.Marshal(pb.Env)
	if string(pbj) != string(pcj) {
		t.Errorf("a pooled kernel's environment %s, a cold one's %s", pbj, pcj)
	}
	if s := pool.Stats(); s.Hits != 2 || s.Misses != 0 || s.Failures != 0 {
		t.Errorf("pool: %+v", s)
	}
}

// BenchmarkPoolHandOutVsColdStart: the containerd pool's hand-out (a session's directory
// mounted at /work) beside a cold detached start of the same description.
//
//	go test -run '^$' -bench PoolHandOutVsColdStart -benchtime 20x -count 3 ./transports/containerd/
func BenchmarkPoolHandOutVsColdStart(b *testing.B) {
	d := containerdtest.Daemon(b)
	o := ctrd.Options{RunDir: filepath.Join(b.TempDir(), "run"), User: "65534:65534"}
	pool := newPool(b, d.Client, o, 1)
	pooled, cold := o, o
	pooled.Pool = pool
	pooled.Mounts = []pathmap.Mount{{Host: b.TempDir(), Sandbox: "/work"}}
	cold.Mounts = pooled.Mounts
	transporttest.BenchHandOut(b, newTransport(b, d.Client, pooled), newTransport(b, d.Client, cold),
		transports.Spec{SessionID: "bench", Dir: "/work"}, func() { transporttest.WaitReady(b, pool, 1) })
}
