package main

import (
	"github.com/spf13/cobra"
)

// newRootCmd builds the command tree. Each verb lives in its own file.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "kennel",
		Short:         "Run untrusted Python kernels in a sandbox of your choosing",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRunCmd(), newVersionCmd(), newWorkspaceCmd(), newConfigCmd(), newHostCmd(), newImageCmd(),
		newServeCmd(), newPsCmd(), newCreateCmd(), newExecCmd(), newJobsCmd(), newLogsCmd(), newStopCmd(), newRmCmd(), newFunctionsCmd())
	return root
}
