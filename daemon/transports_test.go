package daemon_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	tasks "github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/api"
	kclient "github.com/kennel-dev/kennel/client"
	"github.com/kennel-dev/kennel/daemon"
	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/internal/fakekernel"
	"github.com/kennel-dev/kennel/internal/procfs"
	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/launch"
	"github.com/kennel-dev/kennel/transports"
	ctrd "github.com/kennel-dev/kennel/transports/containerd"
	"github.com/kennel-dev/kennel/transports/containerd/containerdtest"
	"github.com/kennel-dev/kennel/transports/docker"
	"github.com/kennel-dev/kennel/transports/ssh"
	"github.com/kennel-dev/kennel/transports/ssh/sshtest"
	"github.com/kennel-dev/kennel/transports/wrapped/wrappedtest"
)

// cell runs code in session id through the API and returns its result text.
func cell(t *testing.T, c *kclient.Client, id, code string) *api.CellReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	budget := int64(30000)
	rep, err := c.RunCell(ctx, id, api.RunCell{Code: code, BudgetMS: &budget})
	if err != nil {
		t.Fatalf("cell %q: %v", code, err)
	}
	if rep.Cell == nil || rep.Cell.Status != "ok" {
		t.Fatalf("cell %q: %+v", code, rep)
	}
	return rep
}

// containersOf lists the kernel containers of session id.
func containersOf(t *testing.T, cli *client.Client, id string) int {
	t.Helper()
	res, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", docker.LabelSession+"="+id)})
	if err != nil {
		t.Fatal(err)
	}
	return len(res.Items)
}

// TestTheDaemonServesEveryTransport: through the real daemon and its client, a session
// is created, runs a cell and is deleted on each transport — local, wrapped (bwrap),
// Docker (the real engine, locked down as under kennel run --docker), ssh (a real sshd)
// and containerd (a containerd the test starts, locked down likewise) — with the same API
// calls; each kernel runs where its transport says, and a deleted containerd session
// leaves no container, task, snapshot or lease.
func TestTheDaemonServesEveryTransport(t *testing.T) {
	srv := sshtest.Start(t)
	kit := launch.New(launch.Options{Hosts: ssh.HostsOptions{ConfigFile: srv.ConfigFile, KnownHosts: srv.KnownHosts, AgentSocket: "none"}})
	t.Cleanup(func() { _ = kit.Close() })
	r := serve(t, daemon.Options{Kit: kit})
	ctx := context.Background()
	hostOnly := filepath.Join(t.TempDir(), "host-only")
	if err := os.WriteFile(hostOnly, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	where := "import os\n(os.getuid(), os.path.exists(" + pyQuote(hostOnly) + "), os.getcwd())"

	type tc struct {
		name string
		req  func(t *testing.T) api.CreateSession
		want func(t *testing.T, dir string, result string)
		// gone, when set, checks what the deleted session left.
		gone func(t *testing.T, id string)
	}
	var ctrdD *containerdtest.D
	for _, c := range []tc{
		{"local", func(t *testing.T) api.CreateSession {
			return api.CreateSession{Cwd: t.TempDir(), Transport: &api.Transport{Local: &api.Local{}}}
		}, func(t *testing.T, dir, res string) {
			if want := "(" + itoa(os.Getuid()) + ", True, '" + dir + "')"; res != want {
				t.Errorf("local: %s, want %s", res, want)
			}
		}, nil},
		{"wrapped", func(t *testing.T) api.CreateSession {
			testneed.Tools(t, "bwrap")
			dir := t.TempDir()
			return api.CreateSession{Cwd: dir, Transport: &api.Transport{
				ArgvPrefix: wrappedtest.BwrapPrefix(t, dir, "/work"), Python: wrappedtest.SandboxPython(t),
				PathMap: []api.Mount{{Sandbox: "/work", Host: dir}},
			}}
		}, func(t *testing.T, dir, res string) {
			if want := "(" + itoa(os.Getuid()) + ", False, '/work')"; res != want {
				t.Errorf("wrapped: %s, want %s", res, want)
			}
		}, nil},
		{"docker", func(t *testing.T) api.CreateSession {
			dockerneed.KernelEngine(t)
			return api.CreateSession{Cwd: t.TempDir(), Transport: &api.Transport{Docker: &api.Docker{}}}
		}, func(t *testing.T, dir, res string) {
			if !strings.HasSuffix(res, ", False, '"+dir+"')") || strings.HasPrefix(res, "(0,") {
				t.Errorf("docker: %s: want a non-root kernel that sees only its mount", res)
			}
		}, nil},
		{"ssh", func(t *testing.T) api.CreateSession {
			return api.CreateSession{Transport: &api.Transport{SSH: &api.SSH{Target: sshtest.Alias}}}
		}, func(t *testing.T, dir, res string) {
			if !strings.HasSuffix(res, "'"+srv.Home+"')") {
				t.Errorf("ssh: %s, want the remote home %s", res, srv.Home)
			}
		}, nil},
		{"containerd", func(t *testing.T) api.CreateSession {
			ctrdD = containerdtest.Own(t)
			return api.CreateSession{Cwd: t.TempDir(), Transport: &api.Transport{Containerd: &api.Containerd{Address: ctrdD.Address}}}
		}, func(t *testing.T, dir, res string) {
			if !strings.HasSuffix(res, ", False, '"+dir+"')") || strings.HasPrefix(res, "(0,") {
				t.Errorf("containerd: %s: want a non-root kernel that sees only its mount", res)
			}
		}, func(t *testing.T, id string) {
			ctx, cancel := context.WithTimeout(namespaces.WithNamespace(context.Background(), ctrd.Namespace), 30*time.Second)
			defer cancel()
			var cs, ts, ls, snaps int
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				c, err := ctrdD.Client.Containers(ctx)
				if err != nil {
					t.Fatal(err)
				}
				tl, err := ctrdD.Client.TaskService().List(ctx, &tasks.ListTasksRequest{})
				if err != nil {
					t.Fatal(err)
				}
				l, err := ctrdD.Client.LeasesService().List(ctx)
				if err != nil {
					t.Fatal(err)
				}
				snaps = 0
				if err := ctrdD.Client.SnapshotService(ctrd.DefaultSnapshotter).Walk(ctx, func(context.Context, snapshots.Info) error {
					snaps++
					return nil
				}, `labels."`+ctrd.LabelKennel+`"==1`); err != nil {
					t.Fatal(err)
				}
				cs, ts, ls = len(c), len(tl.Tasks), len(l)
				if cs+ts+ls+snaps == 0 || time.Now().After(deadline) {
					break
				}
			}
			if cs+ts+ls+snaps != 0 {
				t.Errorf("deleted session %s left %d containers, %d tasks, %d leases, %d snapshots", id, cs, ts, ls, snaps)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := c.req(t)
			s, err := r.c.CreateSession(ctx, req, kclient.CreateOptions{})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			got, err := r.c.Session(ctx, s.ID)
			if err != nil || got.Kernel.Transport == nil || *got.Kernel.Transport != c.name {
				t.Errorf("session: %+v, %v; want transport %s", got, err, c.name)
			}
			rep := cell(t, r.c, s.ID, where)
			if rep.Cell.Result == nil {
				t.Fatalf("no result: %+v", rep)
			}
			c.want(t, req.Cwd, *rep.Cell.Result)
			if err := r.c.DeleteSession(ctx, s.ID); err != nil {
				t.Fatal(err)
			}
			if c.gone != nil {
				c.gone(t, s.ID)
			}
		})
	}
}

// TestAGracefulShutdownLeavesNoContainer: a daemon with a Docker session whose cell runs
// a job (a shell that ignores SIGTERM) and a busy loop stops on its context within
// seconds, and leaves no container behind.
func TestAGracefulShutdownLeavesNoContainer(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	logs := &syncBuf{}
	r := serve(t, daemon.Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	defer func() {
		if t.Failed() {
			t.Logf("daemon log:\n%s", logs.String())
		}
	}()
	ctx := context.Background()
	s, err := r.c.CreateSession(ctx, api.CreateSession{Cwd: t.TempDir(), Transport: &api.Transport{Docker: &api.Docker{}}}, kclient.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.RunJob(ctx, s.ID, "trap '' TERM; sleep 1000"); err != nil {
		t.Fatal(err)
	}
	budget := int64(0)
	if _, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "while True: pass", BudgetMS: &budget}); err != nil {
		t.Fatal(err)
	}
	if n := containersOf(t, cli, s.ID); n != 1 {
		t.Fatalf("%d containers for the session before the shutdown", n)
	}
	start := time.Now()
	r.stop()
	took := time.Since(start)
	if n := containersOf(t, cli, s.ID); n != 0 {
		t.Fatalf("%d containers left after a graceful shutdown", n)
	}
	t.Logf("graceful shutdown with a busy Docker kernel took %v", took.Round(time.Millisecond))
	if took > 20*time.Second {
		t.Fatalf("the shutdown took %v: a kernel held it past its kill grace", took)
	}
}

// TestServeSweepsTheContainersOfDeadControllers: kennel serve removes, at its start, the
// kernel containers a dead controller left (as kennel run --docker does).
func TestServeSweepsTheContainersOfDeadControllers(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	dead, err := docker.Self()
	if err != nil {
		t.Fatal(err)
	}
	dead.PID, dead.Start = 1<<22-1, 1 // a pid no process has
	tr, err := docker.New(cli, docker.Options{Controller: dead})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k, err := tr.Start(ctx, transports.Spec{SessionID: "orphan" + itoa(os.Getpid()), Dir: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Kill(context.Background()) })
	if n := containersOf(t, cli, "orphan"+itoa(os.Getpid())); n != 1 {
		t.Fatalf("%d orphan containers", n)
	}
	serve(t, daemon.Options{})
	deadline := time.Now().Add(30 * time.Second)
	for containersOf(t, cli, "orphan"+itoa(os.Getpid())) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not remove a dead controller's container at its start")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestNoKernelOutlivesItsSession: a wrapped kernel whose frame stream ends while it runs
// on (a fake that ignores SIGTERM) fails its cell and is killed; the next cell starts a
// fresh one; deleting the session ends that one too: no process of either is left.
func TestNoKernelOutlivesItsSession(t *testing.T) {
	b, err := images.Stub()
	if err != nil {
		t.Fatal(err)
	}
	r := serve(t, daemon.Options{})
	ctx := context.Background()
	s, err := r.c.CreateSession(ctx, api.CreateSession{Cwd: t.TempDir(), Transport: &api.Transport{
		ArgvPrefix: fakekernel.Prefix("mute", "", b.Hash()),
	}}, kclient.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	budget := int64(20000)
	for i := range 2 {
		start := time.Now()
		rep, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "1", BudgetMS: &budget})
		t.Logf("cell %d: %v after %v", i, err, time.Since(start).Round(time.Millisecond))
		var ae *api.Error
		if !errors.As(err, &ae) && (rep == nil || rep.Cell != nil) {
			t.Fatalf("a cell of a mute kernel: %+v, %v", rep, err)
		}
	}
	start := time.Now()
	if err := r.c.DeleteSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	t.Logf("delete took %v", time.Since(start).Round(time.Millisecond))
	deadline := time.Now().Add(15 * time.Second)
	for {
		fakes := fakesOf(t)
		if len(fakes) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, pid := range fakes {
				_ = testproc.Kill(pid, syscall.SIGKILL)
			}
			t.Fatalf("fake kernels %v outlived their session", fakes)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fakesOf lists the live fake kernels of this test binary.
func fakesOf(t *testing.T) []int {
	t.Helper()
	procs, err := procfs.All()
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, p := range procs {
		if p.Zombie() {
			continue
		}
		env, err := os.ReadFile("/proc/" + itoa(p.PID) + "/environ")
		if err == nil && strings.Contains(string(env), "KENNEL_FAKE_KERNEL=mute") {
			out = append(out, p.PID)
		}
	}
	return out
}

func pyQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }

func itoa(n int) string { return strconv.Itoa(n) }

// TestServeRemovesTheSpillOfSessionsItNoLongerHas: spill files a daemon's sessions left
// (a crash, a SIGKILL) are removed when the next daemon starts on that state directory.
func TestServeRemovesTheSpillOfSessionsItNoLongerHas(t *testing.T) {
	state := filepath.Join(shortDir(t), "state")
	left := filepath.Join(state, "output", "session-0123456789ab")
	if err := os.MkdirAll(left, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, "kennel-spill-1"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	r := serve(t, daemon.Options{StateDir: state})
	// The socket listens from its bind, before the start's sweep; the daemon answers
	// only after it: an answer proves the sweep ran.
	if _, err := r.c.Sessions(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Fatalf("a dead session's spill directory survived the daemon's start: %v", err)
	}
}
