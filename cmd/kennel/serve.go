package main

import (
	"fmt"
	"os"

	"github.com/kennel-dev/kennel/daemon"
	"github.com/kennel-dev/kennel/launch"
	"github.com/kennel-dev/kennel/settings"
	"github.com/spf13/cobra"
)

// newServeCmd builds `kennel serve`: the daemon on its private socket.
func newServeCmd() *cobra.Command {
	var socket, state string
	var debug, stopKernels bool
	cmd := &cobra.Command{
		Use:   "serve [--socket PATH] [--state DIR] [--stop-kernels]",
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
and remote process within its kill grace). kennel rm ends one session for good.`,
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
			if state == "" {
				state = daemon.DefaultStateDir(os.Getenv)
			}
			kit := launch.New(launch.Options{RunDir: daemon.KernelRunDir(state)})
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
	cmd.Flags().BoolVar(&debug, "debug", false, "log the daemon's and the sessions' diagnostics to stderr")
	return cmd
}
