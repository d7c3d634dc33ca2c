package main

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/kennel-dev/kennel/daemon"
	"github.com/kennel-dev/kennel/launch"
	"github.com/kennel-dev/kennel/settings"
	"github.com/kennel-dev/kennel/transports/kubernetes"
	"github.com/spf13/cobra"
)

// newServeCmd builds `kennel serve`: the daemon on its private socket.
func newServeCmd() *cobra.Command {
	var socket, state string
	var debug, stopKernels bool
	var pools []string
	var poolNode, poolRuntime string
	cmd := &cobra.Command{
		Use:   "serve [--socket PATH] [--state DIR] [--stop-kernels] [--pool KIND=N [--pool-node NODE] [--pool-runtime ENDPOINT]]",
		Short: "Run the kennel daemon: many sessions behind an HTTP API on a private socket",
		Long: `Run the daemon. It serves kennel's HTTP API (GET /openapi.json describes it) on a unix
socket only your user can reach: by default kennel.sock in $XDG_RUNTIME_DIR/kennel, else in
$TMPDIR/kennel-<uid> (/tmp when TMPDIR is unset).

The socket's directory is created 0700 when missing; an existing one must be a real
directory you own that group and others cannot write, or the daemon does not start. A
connection from another user is closed before anything is read from it.

A session created without a transport runs where the kernelTransport setting of the
project at its working directory says (local kernels by default); one created with a
transport (kennel create --docker, --ssh, --transport-argv, --local) runs exactly there.
At start the daemon removes the spill files of sessions it no longer has and the Docker
containers of controllers that are gone.

Sessions outlive the daemon. Their kernels run detached (each in its own session, reached
over a socket in <state>/run), and the daemon keeps every session in <state>/state.db. SIGTERM
or Ctrl-C stops the daemon: it stops accepting, lets each kernel run on alone for its grace
(an hour unless told otherwise), keeps its record, and removes its socket; the next
kennel serve on the same state directory resumes every session, namespace and all (a kernel
that ended meanwhile is replaced by a fresh one, and the session says its namespace was
lost). With --stop-kernels the daemon ends every session instead (each kernel, container
and remote process within its kill grace). kennel rm ends one session for good.

With --pool docker=N (or the global pool setting, {"pool": {"docker": N}}) the daemon keeps N
ready Docker kernels of the default image and lock-down, each started and waiting for a
session: a session whose Docker description matches (image, limits, user, network) is
handed one at once and the pool refills in the background; any other starts cold.
--pool containerd=N does the same for containerd kernels on its default address, and
--pool kubernetes=N for Kubernetes pods of the default kubeconfig on the daemon's own
node (--pool-node, by default the node that is this machine; its container runtime's CRI
socket is --pool-runtime, by default containerd's): a session takes one when its
kubernetes.node is that node. The create reply says which ("pool": "hit" or "miss"), and
/metrics counts hits, misses and refill time. A pooled kernel is a fresh one: it has run
nothing, gets the session's mounts (mounted into its container at hand-out), environment
and working directory, and serves that session alone. A pool needs a daemon running as
root, a local engine (for Kubernetes, the pods' node) and runc.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// The daemon logs at the global logLevel setting's level (--debug: everything).
			g, err := settings.Load(settings.LoadOptions{})
			if err != nil {
				return err
			}
			logger := newLogger(cmd.ErrOrStderr(), debug, g.Settings.LogLevel)
			for _, p := range g.Problems {
				logger.Warn("settings: " + p.Error())
			}
			state = cmp.Or(state, daemon.DefaultStateDir(os.Getenv))
			sizes, err := poolSizes(g.Settings.Pool, pools)
			if err != nil {
				return err
			}
			kit := launch.New(launch.Options{RunDir: daemon.KernelRunDir(state), Pools: launch.Pools{
				Docker: sizes["docker"], Containerd: sizes["containerd"],
				Kubernetes: sizes["kubernetes"], KubernetesNode: poolNode, KubernetesRuntime: poolRuntime,
			}})
			defer kit.Close()
			srv, err := daemon.New(daemon.Options{
				Socket: socket, StateDir: state, Logger: logger, Kit: kit, Default: daemon.FromSettings,
				StopKernels: stopKernels,
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "kennel: serving on %s\n", srv.Socket())
			return srv.Serve(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&socket, "socket", "", "the socket's path (default: see above)")
	cmd.Flags().StringVar(&state, "state", "", "the daemon's private state directory (default: $XDG_STATE_HOME/kennel or ~/.local/state/kennel)")
	cmd.Flags().BoolVar(&stopKernels, "stop-kernels", false, "end every session's kernel at shutdown instead of letting it run on for the next daemon to resume")
	cmd.Flags().StringArrayVar(&pools, "pool", nil, "keep N ready kernels of a transport's default description, KIND=N (docker, containerd, kubernetes; at most 64; overrides the pool setting)")
	cmd.Flags().StringVar(&poolNode, "pool-node", "", "the daemon's own Kubernetes node, where --pool kubernetes=N keeps its pods (default: the node that is this machine)")
	cmd.Flags().StringVar(&poolRuntime, "pool-runtime", "", "the CRI endpoint of that node's container runtime (default "+kubernetes.DefaultRuntime+")")
	cmd.Flags().BoolVar(&debug, "debug", false, "log the daemon's and the sessions' diagnostics to stderr")
	return cmd
}

// poolSizes is the pool setting with each --pool KIND=N flag over it; a flag that names
// no pool kind, or a size that is no whole number from 0 to settings.MaxPool, is refused
// with the flag named.
func poolSizes(setting settings.Pool, flags []string) (map[string]int, error) {
	sizes := map[string]int{}
	maps.Copy(sizes, setting)
	for _, f := range flags {
		kind, num, ok := strings.Cut(f, "=")
		if !ok || !slices.Contains(settings.PoolKinds, kind) {
			return nil, fmt.Errorf("--pool %q: want KIND=N, KIND one of %q", f, settings.PoolKinds)
		}
		n, err := strconv.Atoi(num)
		if err != nil || n < 0 || n > settings.MaxPool {
			return nil, fmt.Errorf("--pool %q: N must be a whole number from 0 to %d", f, settings.MaxPool)
		}
		sizes[kind] = n
	}
	return sizes, nil
}
