package main

import (
	"fmt"

	"github.com/kennel-dev/kennel/daemon"
	"github.com/kennel-dev/kennel/launch"
	"github.com/kennel-dev/kennel/settings"
	"github.com/spf13/cobra"
)

// newServeCmd builds `kennel serve`: the daemon on its private socket.
func newServeCmd() *cobra.Command {
	var socket, state string
	var debug bool
	cmd := &cobra.Command{
		Use:   "serve [--socket PATH] [--state DIR]",
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
containers of controllers that are gone. SIGTERM or Ctrl-C stops the daemon: it stops
accepting, ends every session (each kernel, container and remote process within its kill
grace) and removes its socket.`,
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
			kit := launch.New(launch.Options{})
			defer kit.Close()
			srv, err := daemon.New(daemon.Options{
				Socket: socket, StateDir: state, Logger: logger, Kit: kit, Default: daemon.FromSettings,
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
	cmd.Flags().BoolVar(&debug, "debug", false, "log the daemon's and the sessions' diagnostics to stderr")
	return cmd
}
