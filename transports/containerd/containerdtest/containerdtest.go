// Package containerdtest starts a containerd daemon of the test's own for the containerd
// transport's tests: its own config, root, state, socket and opt directory under a fresh
// directory in /tmp, never the machine's daemon nor the one Docker runs. The daemon starts
// once per test binary, at the first Daemon call, with the kernel image imported from the
// machine's Docker Engine (`docker save`, no registry); Main stops it and removes what it
// left. It needs root, containerd, runc and the runc shim on PATH, and the Docker kernel
// image of the current stub: a test that lacks one fails under CI=true and skips
// elsewhere, naming it (internal/testneed).
//
//	func TestMain(m *testing.M) { os.Exit(containerdtest.Main(m)) }
//
//	func TestX(t *testing.T) {
//		d := containerdtest.Daemon(t) // d.Client, d.Address
//		...
//	}
package containerdtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	dclient "github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	ctrd "github.com/kennel-dev/kennel/transports/containerd"
)

// D is the test's daemon.
type D struct {
	// Address is its socket; Dir the directory holding its config, root and state.
	Address, Dir string
	// Client is a client of it in ctrd.Namespace, shared by the tests (do not close it).
	Client *client.Client
	// Log is the daemon's log file.
	Log string

	cmd    *exec.Cmd
	exited chan error // cmd.Wait's result, received once: by start or by stop
}

var (
	mu      sync.Mutex
	daemon  *D
	started bool
	failure struct {
		what string
		err  error
	}
)

// Daemon returns the test binary's daemon, starting it at the first call, with the kernel
// image of the embedded stub imported (ctrd.Ref). What is missing to run it fails t under
// CI=true and skips it elsewhere.
func Daemon(t testing.TB) *D {
	t.Helper()
	testneed.Root(t) // containerd and runc need root
	testneed.Tools(t, "containerd", "runc", "containerd-shim-runc-v2")
	mu.Lock()
	defer mu.Unlock()
	if !started {
		// The kernel image comes from the machine's Docker Engine; a test that skips for
		// want of it leaves the start to the next one, which skips the same way.
		cli := dockerneed.KernelEngine(t)
		started = true
		daemon, failure.what, failure.err = launch(cli)
	}
	if failure.err != nil {
		testneed.Missing(t, failure.what, failure.err)
	}
	return daemon
}

// Own starts a daemon of t's own, with the kernel image of the embedded stub imported,
// and stops it (removing its tasks, containers and directory) when t ends. It is for
// packages whose TestMain cannot call Main (daemon, cmd/kennel); it takes the import's
// time at each call. What is missing fails t under CI=true and skips it elsewhere.
func Own(t testing.TB) *D {
	t.Helper()
	testneed.Root(t)
	testneed.Tools(t, "containerd", "runc", "containerd-shim-runc-v2")
	d, what, err := launch(dockerneed.KernelEngine(t))
	if d != nil {
		t.Cleanup(d.stop)
	}
	if err != nil {
		testneed.Missing(t, what, err)
	}
	return d
}

// launch starts a daemon and imports the kernel image from cli into it. On an error it
// names what is missing; a daemon that started is returned even then, to be stopped.
func launch(cli *dclient.Client) (*D, string, error) {
	d, err := start()
	if err != nil {
		return nil, "a containerd of the test's own", err
	}
	if err := d.importImage(cli); err != nil {
		return d, "the kernel image imported into containerd", err
	}
	return d, "", nil
}

// Main runs the tests and then stops the daemon (if one started), removing its tasks,
// containers and directory.
func Main(m *testing.M) int {
	code := m.Run()
	mu.Lock()
	defer mu.Unlock()
	if daemon != nil {
		daemon.stop()
	}
	return code
}

const config = `version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q
`

func start() (*D, error) {
	dir, err := os.MkdirTemp("", "kctd-") // short: the socket's path must fit sun_path
	if err != nil {
		return nil, err
	}
	d := &D{Dir: dir, Address: filepath.Join(dir, "c.sock"), Log: filepath.Join(dir, "containerd.log")}
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, config, filepath.Join(dir, "root"), filepath.Join(dir, "state"), d.Address, d.Address+".ttrpc", filepath.Join(dir, "opt")), 0o600); err != nil {
		return nil, err
	}
	log, err := os.Create(d.Log)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	d.cmd = exec.Command("containerd", "--config", cfg)
	d.cmd.Stdout, d.cmd.Stderr = log, log
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	d.exited = make(chan error, 1)
	go func() { d.exited <- d.cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		cli, err := ctrd.Connect(ctx, ctrd.ConnectOptions{Address: d.Address})
		cancel()
		if err == nil {
			d.Client = cli
			return d, nil
		}
		select {
		case err := <-d.exited:
			return nil, fmt.Errorf("containerd exited (%v): %s", err, tail(d.Log))
		default:
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("containerd did not answer within 20 s: %v: %s", err, tail(d.Log))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *D) importImage(cli *dclient.Client) error {
	b, err := images.Stub()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, _, err = ctrd.ImportFromDocker(ctx, d.Client, func(ctx context.Context, ref string) (io.ReadCloser, error) {
		return cli.ImageSave(ctx, []string{ref})
	}, b, ctrd.ImportOptions{})
	return err
}

// stop removes every container of the namespace (killing its task), then ends the daemon
// (SIGTERM, SIGKILL after 10 s) and removes its directory.
func (d *D) stop() {
	if d.Client != nil {
		ctx, cancel := context.WithTimeout(namespaces.WithNamespace(context.Background(), ctrd.Namespace), 60*time.Second)
		if cs, err := d.Client.Containers(ctx); err == nil {
			for _, c := range cs {
				if task, err := c.Task(ctx, nil); err == nil {
					_, _ = task.Delete(ctx, client.WithProcessKill)
				}
				_ = c.Delete(ctx, client.WithSnapshotCleanup)
			}
		}
		cancel()
		d.Client.Close()
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
	}
	_ = os.RemoveAll(d.Dir)
}

// tail is the end of a log file, for an error.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}
