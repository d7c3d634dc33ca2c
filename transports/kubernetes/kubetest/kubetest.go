package kubetest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/images/kernelimage"
	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
)

// Namespace is the namespace Cluster creates for the tests.
const Namespace = "kennel-test"

// PauseImage is the cluster's sandbox (pause) image, made offline by cluster/build.sh.
const PauseImage = "localhost/kubetest/pause:1"

// LockFile is the machine-wide lock a test binary holds for the life of its cluster (the
// cluster's ports are fixed). It holds the run directory of the cluster of its holder.
const LockFile = "/run/kennel-kubetest.lock"

// CNIBin is where the pod network's CNI plugins (Debian's containernetworking-plugins) are.
const CNIBin = "/usr/lib/cni"

// LockWait bounds how long Cluster waits for another test binary's cluster to end.
const LockWait = 30 * time.Minute

// InstallCommand is the command that installs what the cluster needs; a test that lacks it
// names it.
const InstallCommand = "sudo transports/kubernetes/kubetest/cluster/install.sh (or sudo bash .ci/install)"

// C is a running cluster. Its fields are set by Cluster and are read-only; a C is safe for
// concurrent use by the tests.
type C struct {
	// Kubeconfig is an admin kubeconfig file (a token of group system:masters).
	Kubeconfig string
	// Config is loaded from Kubeconfig.
	Config *rest.Config
	// Client is a client of Config.
	Client kubernetes.Interface
	// Namespace is Namespace: created, with its "default" ServiceAccount present.
	Namespace string
	// Node is the name of the cluster's one node ("localhost").
	Node string
	// Image is the kernel image of the embedded stub on the node, under the name kubelet
	// resolves "kennel-kernel:<hash12>" to (docker.io/library/kennel-kernel:<hash12>).
	// Nothing is pulled: pods give it imagePullPolicy Never.
	Image string
	// Pause is the node's sandbox image (PauseImage).
	Pause string
	// Dir is the cluster's run directory (a fresh one in /tmp): PKI, etcd data, containerd's
	// root, state and socket, kubelet's dirs, and the components' logs under Dir/logs.
	// Main removes it.
	Dir string
	// Bin is the directory of the cluster's binaries (kubectl, kubelet, kube-apiserver, ...),
	// in the build cache; read-only.
	Bin string

	script string
	lock   *os.File
	before hostState
	gone   atomic.Bool // down ran
	// downLog is the output of cluster.sh down.
	downLog string
}

// Kubectl runs the cluster's kubectl with c's admin kubeconfig (and its cache in c.Dir,
// not ~/.kube) and returns its combined output. A kubectl that exits non-zero is an *exec.ExitError (the output holds its
// message).
func (c *C) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.Bin, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig, "--cache-dir", filepath.Join(c.Dir, "kubectl-cache")}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(tail(out, 2000)))
	}
	return string(out), nil
}

// The test binary's cluster.
var (
	mu      sync.Mutex
	shared  *C
	failure error // why the first start failed
)

// Cluster returns the test binary's cluster, starting it at the first call (cluster.sh up
// in a fresh run directory, the kernel image imported from the Docker Engine, Namespace
// created); later calls return the same one, and a start that failed fails them the same
// way. Starting waits (up to LockWait) for the machine-wide LockFile. What is missing to
// run it (root, tools, the built binaries, the Docker kernel image) fails t under CI=true
// and skips it elsewhere, naming what is missing and the command that installs it.
func Cluster(t testing.TB) *C {
	t.Helper()
	e := need(t)
	mu.Lock()
	defer mu.Unlock()
	if shared == nil && failure == nil {
		ctx, cancel := context.WithTimeout(context.Background(), LockWait+10*time.Minute)
		defer cancel()
		shared, failure = up(ctx, t, e)
	}
	if failure != nil {
		t.Fatalf("a Kubernetes test cluster: %v", failure)
	}
	return shared
}

// Main runs the package's tests (m.Run) and brings the cluster down after them if one
// was started: every process, mount, network namespace, veth, kubepods cgroup and the
// run directory are gone, the sysctls kubelet rewrote put back, and LockFile released. A
// teardown that fails makes the result non-zero.
//
//	func TestMain(m *testing.M) { os.Exit(kubetest.Main(m)) }
func Main(m *testing.M) int {
	code := m.Run()
	mu.Lock()
	defer mu.Unlock()
	if shared != nil {
		if err := shared.down(context.Background()); err != nil {
			fmt.Fprintf(os.Stderr, "kubetest: %v\n", err)
			code = cmp.Or(code, 1)
		}
		shared = nil
	}
	return code
}

// env is what need found.
type env struct {
	script string         // cluster.sh
	bin    string         // the built binaries
	cli    *client.Client // the Docker Engine holding the kernel image (closed when need's t ends)
	ref    string         // kernelimage.KernelRef of the stub
}

// need checks what a cluster needs, failing t under CI=true and skipping it elsewhere.
func need(t testing.TB) env {
	t.Helper()
	testneed.Root(t) // containerd, kubelet, CNI, mounts and sysctls need root
	testneed.Tools(t, "containerd", "runc", "containerd-shim-runc-v2", "ctr", "openssl", "curl", "bc", "ip", "setsid", "sysctl")
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(CNIBin, p)); err != nil {
			testneed.Missing(t, "the CNI plugins (containernetworking-plugins): run "+InstallCommand, err)
		}
	}
	dir, err := clusterDir()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(dir, "build.sh"), "check").Output()
	if err != nil {
		testneed.Missing(t, "a build of the Kubernetes test cluster (run "+InstallCommand+")", fmt.Errorf("%s not built: %w", bytes.TrimSpace(out), err))
	}
	b, err := images.Stub()
	if err != nil {
		t.Fatal(err)
	}
	return env{script: filepath.Join(dir, "cluster.sh"), bin: filepath.Join(string(bytes.TrimSpace(out)), "bin"),
		ref: kernelimage.KernelRef(b), cli: dockerneed.KernelEngine(t)} // the kernel image comes from the machine's engine
}

// clusterDir is the directory of cluster.sh and build.sh, found from this file's path (the
// tests of any package run with the source tree present).
func clusterDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("kubetest: no source path for cluster/ (built with -trimpath?)")
	}
	dir := filepath.Join(filepath.Dir(file), "cluster")
	if _, err := os.Stat(filepath.Join(dir, "cluster.sh")); err != nil {
		return "", fmt.Errorf("kubetest: cluster scripts: %w", err)
	}
	return dir, nil
}

// up takes LockFile (bringing down a cluster its last holder left), then starts a cluster
// in a fresh run directory. On an error nothing of it is left running.
func up(ctx context.Context, t testing.TB, e env) (_ *C, err error) {
	lock, err := takeLock(ctx, t, e.script)
	if err != nil {
		return nil, err
	}
	before, err := snapshot()
	if err != nil {
		unlock(lock)
		return nil, fmt.Errorf("host state before up: %w", err)
	}
	dir, err := os.MkdirTemp("", "kubetest-") // short: containerd's socket path must fit sun_path
	if err != nil {
		unlock(lock)
		return nil, err
	}
	c := &C{Dir: dir, Bin: e.bin, Kubeconfig: filepath.Join(dir, "admin.kubeconfig"), Namespace: Namespace,
		Image: "docker.io/library/" + e.ref, Pause: PauseImage, script: e.script, lock: lock, before: before}
	defer func() {
		if err != nil {
			if derr := c.down(context.WithoutCancel(ctx)); derr != nil {
				err = fmt.Errorf("%w (and %w)", err, derr)
			}
		}
	}()
	if err := writeLock(lock, dir); err != nil {
		return nil, err
	}
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, e.script, "up", dir)
	cmd.Env = append(os.Environ(), "KUBETEST_BIN="+e.bin, "CNI_BIN="+CNIBin)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("cluster.sh up %s: %w\n%s%s", dir, err, tail(out, 3000), logTails(dir))
	}
	tUp := time.Since(t0)
	t1 := time.Now()
	if err := c.importImage(ctx, e); err != nil {
		return nil, err
	}
	tImport := time.Since(t1)
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", c.Kubeconfig, err)
	}
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, fmt.Errorf("client of %s: %w", c.Kubeconfig, err)
	}
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	if len(nodes.Items) != 1 {
		return nil, fmt.Errorf("the cluster has %d nodes, want 1", len(nodes.Items))
	}
	c.Node = nodes.Items[0].Name
	if err := c.namespace(ctx); err != nil {
		return nil, fmt.Errorf("%w%s", err, logTails(dir))
	}
	t.Logf("kubetest: cluster up in %s (cluster.sh up %s, kernel image import %s, namespace %s); run dir %s",
		time.Since(t0).Round(100*time.Millisecond), tUp.Round(100*time.Millisecond), tImport.Round(100*time.Millisecond),
		(time.Since(t1) - tImport).Round(100*time.Millisecond), dir)
	return c, nil
}

// importImage streams `docker save` of the kernel image into the private containerd's
// k8s.io namespace (the one the CRI plugin serves); ctr names it docker.io/library/<ref>.
func (c *C) importImage(ctx context.Context, e env) error {
	rc, err := e.cli.ImageSave(ctx, []string{e.ref})
	if err != nil {
		return fmt.Errorf("docker save %s: %w", e.ref, err)
	}
	defer rc.Close()
	ctr := []string{"-a", filepath.Join(c.Dir, "containerd", "containerd.sock"), "-n", "k8s.io", "images"}
	cmd := exec.CommandContext(ctx, "ctr", append(ctr, "import", "-")...)
	cmd.Stdin = rc
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("import %s into the cluster's containerd: %w: %s", e.ref, err, bytes.TrimSpace(tail(out, 2000)))
	}
	out, err = exec.CommandContext(ctx, "ctr", append(ctr, "ls", "-q")...).Output()
	if err != nil {
		return fmt.Errorf("list the cluster's images: %w", err)
	}
	if have := strings.Fields(string(out)); !slices.Contains(have, c.Image) {
		return fmt.Errorf("import %s: the cluster's containerd names no %s (it has %q)", e.ref, c.Image, have)
	}
	return nil
}

// namespace creates Namespace and waits for the controller-manager to give it its
// "default" ServiceAccount (pod admission refuses pods without it).
func (c *C) namespace(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.Namespace}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", c.Namespace, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		_, err := c.Client.CoreV1().ServiceAccounts(c.Namespace).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("serviceaccount %s/default: %w", c.Namespace, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("serviceaccount %s/default not made by the controller-manager: %w", c.Namespace, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// down runs cluster.sh down (which removes c.Dir) and releases LockFile.
func (c *C) down(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.script, "down", c.Dir)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	c.downLog = string(out)
	if err != nil {
		return fmt.Errorf("cluster.sh down %s: %w: %s", c.Dir, err, tail(out, 3000))
	}
	c.gone.Store(true)
	unlock(c.lock)
	c.lock = nil
	return nil
}

// takeLock takes LockFile, waiting up to LockWait for another test binary's cluster. A run
// directory left in it by a holder that is gone (its test binary was killed) is brought down
// first.
func takeLock(ctx context.Context, t testing.TB, script string) (*os.File, error) {
	f, err := os.OpenFile(LockFile, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", LockFile, err)
	}
	wait, cancel := context.WithTimeoutCause(ctx, LockWait, fmt.Errorf("another test binary's cluster still up after %s", LockWait))
	defer cancel()
	logged := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", LockFile, err)
		}
		if !logged {
			b, _ := os.ReadFile(LockFile)
			t.Logf("kubetest: waiting for the cluster of another test binary (%s holds %s)", bytes.TrimSpace(b), LockFile)
			logged = true
		}
		select {
		case <-wait.Done():
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", LockFile, context.Cause(wait))
		case <-time.After(250 * time.Millisecond):
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		unlock(f)
		return nil, fmt.Errorf("read %s: %w", LockFile, err)
	}
	if stale := strings.TrimSpace(string(b)); stale != "" {
		if _, err := os.Stat(stale); err == nil {
			t.Logf("kubetest: bringing down %s, left by a test binary that is gone", stale)
			out, err := exec.CommandContext(ctx, script, "down", stale).CombinedOutput()
			if err != nil {
				unlock(f)
				return nil, fmt.Errorf("cluster.sh down %s (left by a test binary that is gone): %w: %s", stale, err, tail(out, 2000))
			}
		}
	}
	if err := writeLock(f, ""); err != nil {
		unlock(f)
		return nil, err
	}
	return f, nil
}

// writeLock records dir (the holder's run directory) in the lock file.
func writeLock(f *os.File, dir string) error {
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("write %s: %w", LockFile, err)
	}
	if dir == "" {
		return nil
	}
	if _, err := f.WriteAt([]byte(dir+"\n"), 0); err != nil {
		return fmt.Errorf("write %s: %w", LockFile, err)
	}
	return f.Sync()
}

// unlock empties the lock file and releases it (closing f drops the flock).
func unlock(f *os.File) {
	if f == nil {
		return
	}
	_ = f.Truncate(0)
	f.Close()
}

// logTails is the end of each component's log in dir/logs, for an error.
func logTails(dir string) string {
	logs, _ := filepath.Glob(filepath.Join(dir, "logs", "*.log"))
	var b strings.Builder
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		fmt.Fprintf(&b, "\n--- %s (end)\n%s", filepath.Base(l), tail(data, 1500))
	}
	return b.String()
}

// tail is the end of b, at most n bytes.
func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
