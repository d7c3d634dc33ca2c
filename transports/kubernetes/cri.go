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

// inContainer reports whether host process pid is in container id's cgroup: the check
// that a pid the runtime reported is still that container's, not a later process's.
func inContainer(pid int, id string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	return err == nil && strings.Contains(string(b), id)
}
