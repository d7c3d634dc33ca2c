package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/protocol"
	"github.com/spf13/cobra"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print kennel's version, its kernel protocol and stub bundle",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			version := "devel"
			if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
				version = bi.Main.Version
			}
			b, err := images.Stub()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "kennel %s\nprotocol %d\nstub bundle %s\n%s %s/%s\n",
				version, protocol.Version, b.Hash(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}
