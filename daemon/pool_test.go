package daemon_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/api"
	kclient "github.com/kennel-dev/kennel/client"
	"github.com/kennel-dev/kennel/daemon"
	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	"github.com/kennel-dev/kennel/launch"
	"github.com/kennel-dev/kennel/transports/containerd/containerdtest"
	"github.com/kennel-dev/kennel/transports/docker"
)

// TestADaemonHandsOutPooledDockerKernels: a daemon keeping a Docker pool of one hands a
// session of the default Docker description its ready kernel ("pool": "hit"), which works
// in the session's own directory; a session of another memory limit starts cold
// ("miss"); /metrics shows the hits, misses and refills; the daemon's start sweep keeps
// the pool's kernels; a graceful shutdown leaves no container of the pool's.
func TestADaemonHandsOutPooledDockerKernels(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	testneed.Root(t) // a pool mounts a session's directories into its containers
	state := t.TempDir()
	kit := launch.New(launch.Options{RunDir: daemon.KernelRunDir(state), Pools: launch.Pools{Docker: 1}})
	t.Cleanup(func() { _ = kit.Close() })
	r := serve(t, daemon.Options{StateDir: state, Kit: kit})
	ctx := context.Background()
	ready := func() {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			st := kit.PoolStats()
			if len(st) == 1 && st[0].Ready == 1 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the pool did not fill: %+v", st)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	ready()
	time.Sleep(500 * time.Millisecond) // the start sweep runs meanwhile: the pool keeps its kernel
	ready()

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mine.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := r.c.CreateSession(ctx, api.CreateSession{Cwd: dir, Transport: &api.Transport{Docker: &api.Docker{}}}, kclient.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Pool != "hit" {
		t.Fatalf("a session of the pool's description: pool %q, want hit", s.Pool)
	}
	res, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "import os; print(open('mine.txt').read(), os.getcwd() == " + pyStr(dir) + ", os.getuid())"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(res.Output.Text); got != "mine True 65534" {
		t.Fatalf("the pooled kernel in its session's directory printed %q", got)
	}
	if got, err := r.c.Session(ctx, s.ID); err != nil || got.Pool != "" {
		t.Errorf("a later read of the session: pool %q (%v), want it said at creation alone", got.Pool, err)
	}

	other, err := r.c.CreateSession(ctx, api.CreateSession{Cwd: t.TempDir(), Transport: &api.Transport{Docker: &api.Docker{Memory: "512m"}}}, kclient.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if other.Pool != "miss" {
		t.Errorf("a session of another memory limit: pool %q, want miss", other.Pool)
	}
	ready()
	m, err := r.c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`kennel_pool_hits_total{transport="docker"} 1`,
		`kennel_pool_misses_total{transport="docker"} 1`,
		`kennel_pool_hit_ratio{transport="docker"} 0.5`,
		`kennel_pool_ready{transport="docker"} 1`,
		`kennel_pool_refills_total{transport="docker"} 2`,
		`kennel_pool_last_refill_seconds{transport="docker"}`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	r.stop()
	if err := kit.Close(); err != nil {
		t.Fatal(err)
	}
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", docker.LabelDetachedOwner+"="+launch.DetachedOwner(daemon.KernelRunDir(state)))})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list.Items {
		t.Errorf("container %.12s (labels %v) left after the daemon and its kit", c.ID, c.Labels)
	}
}

// pyStr is s as a Python string literal.
func pyStr(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}

// TestADaemonHandsOutPooledContainerdKernels: the same with a containerd pool of one on
// the test's containerd: a session of the default containerd description there gets the
// pool's kernel ("pool": "hit") working in its own directory; /metrics counts it.
func TestADaemonHandsOutPooledContainerdKernels(t *testing.T) {
	d := containerdtest.Own(t)
	state := t.TempDir()
	kit := launch.New(launch.Options{RunDir: daemon.KernelRunDir(state), Pools: launch.Pools{Containerd: 1, ContainerdAddress: d.Address}})
	t.Cleanup(func() { _ = kit.Close() })
	r := serve(t, daemon.Options{StateDir: state, Kit: kit})
	ctx := context.Background()
	deadline := time.Now().Add(60 * time.Second)
	for st := kit.PoolStats(); len(st) != 1 || st[0].Ready != 1; st = kit.PoolStats() {
		if time.Now().After(deadline) {
			t.Fatalf("the pool did not fill: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mine.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := r.c.CreateSession(ctx, api.CreateSession{Cwd: dir, Transport: &api.Transport{Containerd: &api.Containerd{Address: d.Address}}}, kclient.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Pool != "hit" {
		t.Fatalf("a session of the pool's description: pool %q, want hit", s.Pool)
	}
	res, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "import os; print(open('mine.txt').read(), os.getcwd() == " + pyStr(dir) + ")"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(res.Output.Text); got != "mine True" {
		t.Fatalf("the pooled kernel in its session's directory printed %q", got)
	}
	m, err := r.c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := `kennel_pool_hits_total{transport="containerd"} 1`; !strings.Contains(m, want) {
		t.Errorf("/metrics lacks %q", want)
	}
}
