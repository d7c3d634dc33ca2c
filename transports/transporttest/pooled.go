package transporttest

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/transports"
)

// PooledStart starts a kernel for spec with mounts, from the test's pool when pooled
// (else cold, on a transport without the pool), and kills it when the test ends.
type PooledStart func(t *testing.T, mounts []pathmap.Mount, spec transports.Spec, pooled bool) transports.Kernel

// PooledProbe is what a kernel sees of itself (probeCell).
type PooledProbe struct {
	Left, Variable bool
	Env            map[string]string
	Cwd            string
	Work           []string
	ReadOnly       string
}

const probeCell = `
import json, os
try:
    open('/ref/x', 'w'); ro = 'writable'
except OSError as e:
    ro = e.strerror
print(json.dumps({"Left": os.path.exists('/tmp/left'), "Variable": 'leftover' in globals(), "Env": dict(os.environ), "Cwd": os.getcwd(), "Work": sorted(os.listdir('/work')), "ReadOnly": ro}))`

func probe(t *testing.T, c *Client) PooledProbe {
	t.Helper()
	out, err := c.Run(probeCell)
	if err != nil {
		t.Fatal(err)
	}
	var p PooledProbe
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("probe: %v in %q", err, out)
	}
	return p
}

// PooledKernelKeepsNothing is the isolation test of a warm pool of one kernel (pool),
// whose kernels see host directories at /work and /ref: session A takes the pool's
// kernel and leaves a file in /tmp, a variable and a secret in its environment, and
// writes into its own /work; once A has ended and the pool is full again, session B's
// kernel, the pool's too, sees none of it: its own environment (the keys and values of a
// kernel started cold for it), its own directory at /work (its writes land there, not in
// A's), its read-only mount read-only, another kernel than A's. It returns B's kernel and
// what B and the cold kernel saw, for a transport's own checks.
func PooledKernelKeepsNothing(t *testing.T, pool Pool, start PooledStart) (kb transports.Kernel, pooled, cold PooledProbe) {
	t.Helper()
	dirA, dirB, ref := t.TempDir(), t.TempDir(), t.TempDir()
	for _, d := range []string{dirA, dirB, ref} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dirB, "b.txt"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(mounts []pathmap.Mount, spec transports.Spec, pooled bool) (transports.Kernel, *Client) {
		t.Helper()
		k := start(t, mounts, spec, pooled)
		want := "" // a cold start without a pool says nothing of one
		if pooled {
			want = transports.PoolHit
		}
		if got := k.Info().Pool; got != want {
			t.Fatalf("session %s's kernel: pool %q, want %q", spec.SessionID, got, want)
		}
		c := NewClient(k)
		if _, err := c.Hello(); err != nil {
			t.Fatal(err)
		}
		return k, c
	}

	ka, ca := run([]pathmap.Mount{{Host: dirA, Sandbox: "/work"}, {Host: ref, Sandbox: "/ref"}},
		transports.Spec{SessionID: "pool-a", Dir: "/work", Env: []string{"SECRET_A=a1"}}, true)
	if _, err := ca.Run("open('/tmp/left', 'w').write('x'); leftover = 42; open('/work/from-a', 'w').write('a')"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dirA, "from-a")); err != nil || string(b) != "a" {
		t.Fatalf("A's write into its mount: %q, %v", b, err)
	}
	if pa := probe(t, ca); !pa.Left || !pa.Variable || pa.Env["SECRET_A"] != "a1" || pa.Cwd != "/work" || pa.ReadOnly != "writable" {
		t.Fatalf("A sees itself as %+v", pa)
	}
	Stop(t, ka)
	WaitReady(t, pool, 1)

	mountsB := []pathmap.Mount{{Host: dirB, Sandbox: "/work"}, {Host: ref, Sandbox: "/ref", ReadOnly: true}}
	kb, cb := run(mountsB, transports.Spec{SessionID: "pool-b", Dir: "/work", Env: []string{"SECRET_B=b1"}}, true)
	if kb.Info().ID == ka.Info().ID {
		t.Fatalf("B's kernel is A's, %s", ka.Info().ID)
	}
	pb := probe(t, cb)
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

	// The environment of a kernel started cold for the same session.
	_, cc := run(mountsB, transports.Spec{SessionID: "pool-cold", Dir: "/work", Env: []string{"SECRET_B=b1"}}, false)
	pc := probe(t, cc)
	if got, want := slices.Sorted(maps.Keys(pb.Env)), slices.Sorted(maps.Keys(pc.Env)); !slices.Equal(got, want) {
		t.Errorf("a pooled kernel's environment has keys %v, a cold one's %v", got, want)
	}
	for _, k := range []string{"PATH", "HOME", "LANG", "SECRET_B"} {
		if pb.Env[k] != pc.Env[k] {
			t.Errorf("%s: pooled %q, cold %q", k, pb.Env[k], pc.Env[k])
		}
	}
	if s := pool.Stats(); s.Hits != 2 || s.Failures != 0 {
		t.Errorf("pool: %+v, want 2 hits and no failure", s)
	}
	return kb, pb, pc
}

// StartFor returns a PooledStart over newTransport, which makes a transport of the
// test's description with mounts, from the pool when pooled.
func StartFor(newTransport func(t *testing.T, mounts []pathmap.Mount, pooled bool) transports.Transport) PooledStart {
	return func(t *testing.T, mounts []pathmap.Mount, spec transports.Spec, pooled bool) transports.Kernel {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		k, err := newTransport(t, mounts, pooled).Start(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			kctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = k.Kill(kctx)
		})
		return k
	}
}
