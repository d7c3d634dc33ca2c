package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// nodeRuntime is the container runtime of the controller's own node, reached over its
// CRI socket (the one kubelet uses): it says which host process runs a pod's container,
// whose mount namespace a pool's hand-out mounts a session's directories in.
type nodeRuntime struct {
	conn *grpc.ClientConn
	rt   runtimeapi.RuntimeServiceClient
}

// dialRuntime connects to the CRI endpoint (a unix socket path, or unix://PATH) and asks
// its version: a runtime out of reach is errdefs.ErrUnavailable.
func dialRuntime(ctx context.Context, endpoint string) (*nodeRuntime, error) {
	sock := strings.TrimPrefix(endpoint, "unix://")
	if !strings.HasPrefix(sock, "/") {
		return nil, fmt.Errorf("node runtime %q: want a unix socket's absolute path (unix:///run/containerd/containerd.sock): %w", endpoint, errdefs.ErrInvalidArgument)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("node runtime %s: %w: %w", sock, err, errdefs.ErrUnavailable)
	}
	r := &nodeRuntime{conn: conn, rt: runtimeapi.NewRuntimeServiceClient(conn)}
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := r.rt.Version(vctx, &runtimeapi.VersionRequest{}); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("node runtime %s: %w: %w", sock, err, errdefs.ErrUnavailable)
	}
	return r, nil
}

// Close ends the connection.
func (r *nodeRuntime) Close() error { return r.conn.Close() }

// containerPid returns the host pid of the main process of container id (a pod status's
// containerID without its "runtime://" prefix), as the runtime's verbose status reports it.
// A runtime that runs it outside this host's kernel (a sandboxed runtime: gVisor, Kata), or
// reports no pid of a running container, is errdefs.ErrUnavailable.
func (r *nodeRuntime) containerPid(ctx context.Context, id string) (int, error) {
	st, err := r.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		return 0, fmt.Errorf("container %s status: %w: %w", id, err, errdefs.ErrUnavailable)
	}
	if st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return 0, fmt.Errorf("container %s: not running (%s): %w", id, st.GetStatus().GetState(), errdefs.ErrUnavailable)
	}
	var info struct {
		Pid         int    `json:"pid"`
		RuntimeType string `json:"runtimeType"`
	}
	if err := json.Unmarshal([]byte(st.GetInfo()["info"]), &info); err != nil || info.Pid <= 0 {
		return 0, fmt.Errorf("container %s: the node's runtime reports no pid: %w", id, errdefs.ErrUnavailable)
	}
	if rt := info.RuntimeType; rt != "" && !strings.Contains(rt, "runc") && !strings.Contains(rt, "crun") {
		return 0, fmt.Errorf("container %s runs on %s, maybe outside this host's kernel, where a session's directories cannot be mounted at hand-out: %w", id, rt, errdefs.ErrUnavailable)
	}
	return info.Pid, nil
}

// isContainerInit reports whether host process pid is the main process of container id
// as podSpec starts it: in the container's cgroup (so not a later process given the pid)
// and running init.py (runsInit). A runtime that keeps a container in a sandbox of its
// own (gVisor's runsc, even behind the runc shim) reports its sandbox's process, which
// runs no init.py: mounts made in that process's namespace would never reach the kernel,
// and its writes would not reach the host.
func isContainerInit(pid int, id string) bool {
	proc := "/proc/" + strconv.Itoa(pid)
	cg, err := os.ReadFile(proc + "/cgroup")
	if err != nil || !strings.Contains(string(cg), id) {
		return false
	}
	cmdline, err := os.ReadFile(proc + "/cmdline")
	return err == nil && runsInit(cmdline)
}

// waitContainerInit waits, up to 5 s, until isContainerInit(pid, id): a runtime reports
// a container running as soon as it told the container's first process to exec its
// command (runc's init runs on until it does).
func waitContainerInit(ctx context.Context, pid int, id string) bool {
	deadline := time.Now().Add(5 * time.Second)
	for !isContainerInit(pid, id) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// runsInit reports whether a /proc cmdline (NUL-separated) is podSpec's command: the
// interpreter, -I, -S, then -c and initProgram.
func runsInit(cmdline []byte) bool {
	argv := strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
	return len(argv) >= 5 && argv[1] == "-I" && argv[2] == "-S" && argv[3] == "-c" && argv[4] == initProgram
}
