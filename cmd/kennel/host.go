package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kennel-dev/kennel/transports/ssh"
)

// newHostCmd builds `kennel host probe HOST`: one probe of a remote host over ssh.
func newHostCmd() *cobra.Command {
	host := &cobra.Command{Use: "host", Short: "Remote hosts reached over ssh"}
	var asJSON bool
	probe := &cobra.Command{
		Use:   "probe [user@]host[:port]",
		Short: "Probe a host: os, arch, home, cores, python3, whether the kernel bundle is staged",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			hosts, err := ssh.NewHosts(ssh.HostsOptions{})
			if err != nil {
				return err
			}
			defer hosts.Close()
			p := hosts.Probe(cmd.Context(), args[0])
			out := cmd.OutOrStdout()
			if asJSON {
				b, _ := json.MarshalIndent(p, "", "  ")
				fmt.Fprintln(out, string(b))
			} else {
				fmt.Fprintf(out, "%s: %s\n", p.Target, p.Status)
				if p.OS != "" {
					fmt.Fprintf(out, "os %s, arch %s, %d cores, home %s\npython %s (%s), bundle staged: %v\n",
						p.OS, p.Arch, p.Cores, p.Home, p.Python, p.PythonPath, p.Staged)
				}
				if p.Hint != "" {
					fmt.Fprintln(cmd.ErrOrStderr(), p.Hint)
				}
			}
			if p.Status != ssh.StatusReady {
				return &exitError{code: 1, msg: string(p.Status)}
			}
			return nil
		},
	}
	probe.Flags().BoolVar(&asJSON, "json", false, "print the probe as JSON")
	host.AddCommand(probe)
	return host
}
