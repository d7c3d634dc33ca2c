// Package kernelimage builds the Docker transport's kernel image offline, with no
// registry: a Debian root file system made by debootstrap (from the mirror apt is
// configured with) is imported as the base image, and Dockerfile (the repository's
// Dockerfile.kernel) is built on it through the Engine API with the stub copied in,
// tagged kennel-kernel:<bundle hash first 12> and labelled with the full hash.
//
// A session never pulls or builds: Check reports a missing image (ErrImageMissing) or
// one of another stub version (ErrImageStale), both naming `kennel image build` and
// both of class errdefs.ErrUnavailable (transports.ErrUnavailable).
//
//	cli, err := client.New(client.FromEnv)
//	if err != nil { ... }
//	b, err := images.Stub()
//	if err != nil { ... }
//	res, err := kernelimage.Build(ctx, cli, b, kernelimage.BuildOptions{Log: os.Stderr})
//	if err != nil { ... }
//	// res.Ref ("kennel-kernel:0123456789ab") now runs the stub as its entrypoint.
//
// The root file system is cached as a tarball in DefaultCacheDir (/var/cache/kennel), so
// a rebuild after `docker image rm` makes no download; debootstrap itself takes about
// 72 s and needs root.
package kernelimage
