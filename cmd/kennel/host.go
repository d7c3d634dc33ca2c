package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/client"
	"github.com/kennel-dev/kennel/daemon"
	"github.com/kennel-dev/kennel/transports/ssh"
)

// newHostCmd builds `kennel host probe HOST`: one probe of a remote host over ssh,
// through the daemon when one runs.
func newHostCmd() *cobra.Command {
	host := &cobra.Command{Use: "host", Short: "Remote hosts reached over ssh"}
	var asJSON bool
	var socket string
	probe := &cobra.Command{
		Use:   "probe [user@]host[:port] [--socket PATH] [--json]",
		Short: "Probe a host: os, arch, home, cores, python3, whether the kernel bundle is staged",
		Long: `Probe a host over ssh: its os, arch, home, cores, python3, and whether the kernel bundle
is staged there. When a daemon answers on its default socket (or on --socket), the probe runs
in the daemon, over its ssh connections and config, and its answer stays in the daemon's
cache (POST /hosts/{host}/probe, then GET /hosts?target= until it has answered); with no
daemon on the default socket kennel probes the host itself. The exit status is 0 when the
host is ready, 1 otherwise (the status and a hint on stderr).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := probeHost(cmd.Context(), socket, args[0])
			if err != nil {
				var ae *api.Error
				if errors.As(err, &ae) && ae.Code == api.CodeInvalid {
					return &exitError{code: 2, msg: ae.Message}
				}
				return err
			}
			printHost(cmd.OutOrStdout(), cmd.ErrOrStderr(), st, asJSON)
			if st.Status != api.HostReady {
				return &exitError{code: 1, msg: string(st.Status)}
			}
			return nil
		},
	}
	probe.Flags().BoolVar(&asJSON, "json", false, "print the host's state as JSON (the API's HostState)")
	probe.Flags().StringVar(&socket, "socket", "", "the daemon's socket; no daemon there is an error (default: as kennel serve, and no daemon there means probing directly)")
	host.AddCommand(probe)
	return host
}

// hostWait bounds the wait for a daemon's probe: the daemon ends every probe within
// daemon.HostProbeTimeout, so this only guards against a daemon that never answers.
const hostWait = daemon.HostProbeTimeout + 15*time.Second

// probeHost probes target through the daemon at socket, or, when socket is "" and no
// daemon answers on the default socket, directly.
func probeHost(ctx context.Context, socket, target string) (*api.HostState, error) {
	explicit := socket != ""
	if !explicit {
		socket = daemon.DefaultSocket(os.Getenv)
	}
	c := client.New(socket)
	defer c.Close()
	_, err := c.ProbeHost(ctx, target)
	var ae *api.Error
	switch {
	case !explicit && (errors.Is(err, client.ErrNoDaemon) || errors.As(err, &ae) && ae.Code == api.CodeNoRoute):
		// No daemon, or one from before the host routes.
		return probeDirectly(ctx, target)
	case err != nil:
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, hostWait)
	defer cancel()
	return c.WaitHost(wctx, target, 0)
}

// probeDirectly probes target over ssh connections of this process's own.
func probeDirectly(ctx context.Context, target string) (*api.HostState, error) {
	hosts, err := ssh.NewHosts(ssh.HostsOptions{})
	if err != nil {
		return nil, err
	}
	defer hosts.Close()
	if _, err := hosts.Resolve(target); err != nil {
		// As the daemon answers a target that does not parse.
		return nil, &api.Error{Status: 400, Code: api.CodeInvalid, Message: err.Error()}
	}
	st := daemon.HostState(hosts.Probe(ctx, target))
	return &st, nil
}

// printHost prints st: as JSON, or as two lines on out and the hint on errOut.
func printHost(out, errOut io.Writer, st *api.HostState, asJSON bool) {
	if asJSON {
		_ = printJSON(out, st)
		return
	}
	fmt.Fprintf(out, "%s: %s\n", st.Target, st.Status)
	if st.OS != "" {
		fmt.Fprintf(out, "os %s, arch %s, %d cores, home %s\npython %s (%s), bundle staged: %v\n",
			st.OS, st.Arch, st.Cores, st.Home, st.Python, st.PythonPath, st.Staged)
	}
	if st.Hint != "" {
		fmt.Fprintln(errOut, st.Hint)
	}
	if st.SignIn != "" {
		fmt.Fprintln(errOut, "to sign in: "+st.SignIn)
	}
}
