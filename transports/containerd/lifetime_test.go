package containerd_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	tasks "github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/transports"
	ctrd "github.com/kennel-dev/kennel/transports/containerd"
	"github.com/kennel-dev/kennel/transports/containerd/containerdtest"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// addressEnv gives a child controller the test daemon's socket.
const addressEnv = "KENNEL_CONTAINERD_TEST_ADDRESS"

// left counts what kennel left in the daemon's namespace: containers, tasks, snapshots
// labelled as kennel's, and leases.
type left struct{ containers, tasks, snapshots, leases int }

func leftovers(t *testing.T, cli *client.Client) left {
	t.Helper()
	ctx, cancel := context.WithTimeout(namespaces.WithNamespace(context.Background(), ctrd.Namespace), 30*time.Second)
	defer cancel()
	var l left
	cs, err := cli.Containers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l.containers = len(cs)
	ts, err := cli.TaskService().List(ctx, &tasks.ListTasksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	l.tasks = len(ts.Tasks)
	if err := cli.SnapshotService(ctrd.DefaultSnapshotter).Walk(ctx, func(context.Context, snapshots.Info) error {
		l.snapshots++
		return nil
	}, `labels."dev.kennel"==1`); err != nil {
		t.Fatal(err)
	}
	ls, err := cli.LeasesService().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l.leases = len(ls)
	return l
}

// waitNoLeftovers waits up to 30 s for nothing to be left.
func waitNoLeftovers(t *testing.T, cli *client.Client) {
	t.Helper()
	var l left
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if l = leftovers(t, cli); l == (left{}) {
			return
		}
	}
	t.Fatalf("left in the namespace: %+v, want nothing", l)
}

// TestStartKillCycles: 50 kernels started and killed one after another leave no task,
// container, snapshot or lease behind.
func TestStartKillCycles(t *testing.T) {
	d := containerdtest.Daemon(t)
	waitNoLeftovers(t, d.Client)
	tr := newTransport(t, d.Client, ctrd.Options{})
	for i := range 50 {
		k, c := transporttest.Start(t, tr, transports.Spec{SessionID: fmt.Sprintf("cycle-%d", i), Dir: "/tmp"})
		if i%2 == 1 {
			if _, err := c.Run("x = 1"); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := k.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		if _, err := k.Wait(); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
	}
	waitNoLeftovers(t, d.Client)
}

// childController plays a controller that starts three kernels and is then killed with
// SIGKILL by the test: it prints each container id, then "ready", then blocks.
func childController() int {
	ctx := context.Background()
	cli, err := ctrd.Connect(ctx, ctrd.ConnectOptions{Address: os.Getenv(addressEnv)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tr, err := ctrd.New(cli, ctrd.Options{})
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

// TestKilledControllerLeavesNothing: a controller killed with SIGKILL leaves its kernels
// running (the shim holds their stdin); the next controller's start-up sweep
// (SweepDaemon) removes their tasks, containers and snapshots, and nothing is left.
func TestKilledControllerLeavesNothing(t *testing.T) {
	d := containerdtest.Daemon(t)
	waitNoLeftovers(t, d.Client)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=controller", addressEnv+"="+d.Address)
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
	if l := leftovers(t, d.Client); l.containers != 3 || l.tasks != 3 {
		t.Fatalf("after the controller's SIGKILL: %+v, want its 3 containers and tasks still there", l)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := ctrd.SweepDaemon(ctx, ctrd.DaemonSweepOptions{ConnectOptions: ctrd.ConnectOptions{Address: d.Address}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sweep: %+v", res)
	if len(res.Removed) != 3 {
		t.Errorf("sweep removed %q, want the 3 containers %q", res.Removed, ids)
	}
	waitNoLeftovers(t, d.Client)
}

// TestKernelOOM: a cell that allocates past the limit in the kernel itself ends the
// kernel by the memory limit: Exit.OOM, code 137, not Killed.
func TestKernelOOM(t *testing.T) {
	d := containerdtest.Daemon(t)
	tr := newTransport(t, d.Client, ctrd.Options{Memory: 96 << 20})
	k, c := transporttest.Start(t, tr, transports.Spec{Dir: "/tmp"})
	if _, err := c.Send("blocks = []\nwhile True:\n    blocks.append(bytearray(16 << 20))"); err != nil {
		t.Fatal(err)
	}
	exit, err := k.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if !exit.OOM || exit.Killed || exit.Code != 137 {
		t.Errorf("a kernel past the memory limit: %+v, want OOM, code 137, not killed", exit)
	}
}

// TestImageMissing: a transport naming an image containerd does not hold refuses to start,
// naming the command that imports it.
func TestImageMissing(t *testing.T) {
	d := containerdtest.Daemon(t)
	tr := newTransport(t, d.Client, ctrd.Options{Image: "docker.io/library/kennel-kernel:000000000000"})
	_, err := tr.Start(context.Background(), transports.Spec{SessionID: "missing", Dir: "/tmp"})
	if err == nil || !strings.Contains(err.Error(), ctrd.BuildCommand) {
		t.Fatalf("start with a missing image: %v, want an error naming %q", err, ctrd.BuildCommand)
	}
}

// TestLimits: the kernel's cgroup (as the host sees it, cgroup v1 under
// /sys/fs/cgroup/<controller>/kennel/<container id>) holds the default limits: 1 GiB of
// memory and of memory+swap, 256 pids, one CPU.
func TestLimits(t *testing.T) {
	d := containerdtest.Daemon(t)
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		t.Skip("cgroup v1 only:", err)
	}
	tr := newTransport(t, d.Client, ctrd.Options{})
	k, _ := transporttest.Start(t, tr, transports.Spec{Dir: "/tmp"})
	read := func(p string) string {
		b, err := os.ReadFile("/sys/fs/cgroup/" + p)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	cg := ctrd.Namespace + "/" + k.Info().ID
	for file, want := range map[string]string{
		"memory/" + cg + "/memory.limit_in_bytes":       "1073741824",
		"memory/" + cg + "/memory.memsw.limit_in_bytes": "1073741824",
		"pids/" + cg + "/pids.max":                      "256",
		"cpu/" + cg + "/cpu.cfs_quota_us":               "100000",
		"cpu/" + cg + "/cpu.cfs_period_us":              "100000",
	} {
		if got := read(file); got != want {
			t.Errorf("%s = %s, want %s", file, got, want)
		}
	}
}
