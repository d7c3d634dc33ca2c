package main

import (
	"cmp"
	"context"
	"fmt"
	"io"

	"github.com/moby/moby/client"
	"github.com/spf13/cobra"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/images/kernelimage"
	"github.com/kennel-dev/kennel/transports"
	ctrd "github.com/kennel-dev/kennel/transports/containerd"
)

// newImageCmd is `kennel image build|check`: the Docker transport's kernel image.
func newImageCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build or check the Docker kernel image (offline, no registry)",
	}
	var o kernelimage.BuildOptions
	var mirror, suite, cache string
	var cd containerdImage
	build := &cobra.Command{
		Use:   "build",
		Short: "Build the kernel image through the Docker Engine API, with no registry",
		Long: `Build the kernel image kennel run --docker uses: kennel-kernel:<stub hash>.

Nothing is pulled. When the base image (kennel-base:bookworm) is missing, a Debian root
file system is made with debootstrap --variant=minbase --include=python3 from the mirror
apt is configured with (needs root; about a minute), cached as a tarball in
/var/cache/kennel, and imported. Then Dockerfile.kernel is built on it with the stub
copied in. An image that is already current is kept: running it again does nothing.

With --containerd the Docker image is then exported (docker save) into the containerd at
--address, namespace kennel, as docker.io/library/kennel-kernel:<stub hash>, and unpacked:
the image kennel run --containerd uses, again with no registry.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Rootfs = kernelimage.RootfsOptions{Mirror: mirror, Suite: suite, CacheDir: cache}
			o.Log = cmd.ErrOrStderr()
			return imageBuild(cmd.Context(), o, cd, cmd.OutOrStdout())
		},
	}
	cd.flags(build)
	build.Flags().BoolVar(&o.Force, "force", false, "rebuild the kernel image even when it is current")
	build.Flags().StringVar(&o.Ref, "tag", "", "the kernel image's tag (default kennel-kernel:<stub hash first 12>)")
	build.Flags().StringVar(&o.Base, "base", "", "the base image's tag (default "+kernelimage.BaseRef+")")
	build.Flags().StringVar(&mirror, "mirror", "", "the Debian mirror for debootstrap (default: apt's)")
	build.Flags().StringVar(&suite, "suite", "", "the Debian release (default "+kernelimage.DefaultSuite+")")
	build.Flags().StringVar(&cache, "cache", "", "where the root file system tarball is cached (default "+kernelimage.DefaultCacheDir+")")
	var tag string
	check := &cobra.Command{
		Use:   "check",
		Short: "Say whether the kernel image is present and of this kennel's stub; no network",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return imageCheck(cmd.Context(), tag, cd, cmd.OutOrStdout())
		},
	}
	cd.flags(check)
	check.Flags().StringVar(&tag, "tag", "", "the kernel image's tag (default kennel-kernel:<stub hash first 12>)")
	cmd.AddCommand(build, check)
	return cmd
}

func engineClient(ctx context.Context) (*client.Client, error) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("docker engine: %w: %w", transports.ErrUnavailable, err)
	}
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		return nil, fmt.Errorf("docker engine %s: %w: %w", cli.DaemonHost(), transports.ErrUnavailable, err)
	}
	return cli, nil
}

// containerdImage are the --containerd flags of `kennel image build|check`.
type containerdImage struct {
	on      bool
	address string
}

func (c *containerdImage) flags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&c.on, "containerd", false, "the containerd transport's image (imported from the Docker image)")
	cmd.Flags().StringVar(&c.address, "address", "", "the containerd socket (default "+ctrd.DefaultAddress+")")
}

func imageBuild(ctx context.Context, o kernelimage.BuildOptions, cd containerdImage, stdout io.Writer) error {
	b, err := images.Stub()
	if err != nil {
		return err
	}
	cli, err := engineClient(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	res, err := kernelimage.Build(ctx, cli, b, o)
	if err != nil {
		return err
	}
	state := "current"
	if res.KernelBuilt {
		state = "built"
	}
	fmt.Fprintf(stdout, "%s %s %s\n", res.Ref, shortImageID(res.ID), state)
	if !cd.on {
		return nil
	}
	ccli, err := ctrd.Connect(ctx, ctrd.ConnectOptions{Address: cd.address})
	if err != nil {
		return err
	}
	defer ccli.Close()
	st, imported, err := ctrd.ImportFromDocker(ctx, ccli, func(ctx context.Context, ref string) (io.ReadCloser, error) {
		return cli.ImageSave(ctx, []string{ref})
	}, b, ctrd.ImportOptions{})
	if err != nil {
		return err
	}
	state = "current"
	if imported {
		state = "imported"
	}
	fmt.Fprintf(stdout, "containerd %s %s %s\n", st.Ref, shortImageID(st.ID), state)
	return nil
}

func imageCheck(ctx context.Context, tag string, cd containerdImage, stdout io.Writer) error {
	b, err := images.Stub()
	if err != nil {
		return err
	}
	if cd.on {
		tag = cmp.Or(tag, ctrd.Ref(b))
		ccli, err := ctrd.Connect(ctx, ctrd.ConnectOptions{Address: cd.address})
		if err != nil {
			return err
		}
		defer ccli.Close()
		st, err := ctrd.Check(ctx, ccli, tag, b)
		if err != nil {
			return &exitError{code: 1, msg: err.Error()}
		}
		fmt.Fprintf(stdout, "containerd %s %s current (stub %s)\n", st.Ref, shortImageID(st.ID), st.Want[:12])
		return nil
	}
	tag = cmp.Or(tag, kernelimage.KernelRef(b))
	cli, err := engineClient(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	st, err := kernelimage.Check(ctx, cli, tag, b)
	if err != nil {
		return &exitError{code: 1, msg: err.Error()}
	}
	fmt.Fprintf(stdout, "%s %s current (stub %s)\n", st.Ref, shortImageID(st.ID), st.Want[:12])
	return nil
}

func shortImageID(id string) string {
	if len(id) > 19 {
		return id[7:19]
	}
	return id
}
