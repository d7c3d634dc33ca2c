package containerd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/images/kernelimage"
)

// BuildCommand is the command that imports the kernel image into containerd; errors about
// a missing or stale image name it.
const BuildCommand = "kennel image build --containerd"

// ErrImageMissing reports that the kernel image is not in containerd's kennel namespace. A
// session never pulls: the fix is BuildCommand. Its class is errdefs.ErrUnavailable.
var ErrImageMissing = fmt.Errorf("kernel image missing in containerd: run `%s` once: %w", BuildCommand, errdefs.ErrUnavailable)

// ErrImageStale reports a kernel image of another stub version (its bundle label is not this
// binary's). Its class is errdefs.ErrUnavailable.
var ErrImageStale = fmt.Errorf("kernel image in containerd stale (another kennel version's stub): run `%s`: %w", BuildCommand, errdefs.ErrUnavailable)

// Ref is the containerd image name of bundle's kernel image: the Docker kernel image's tag
// (kernelimage.KernelRef) as containerd names what `docker save` exports,
// docker.io/library/kennel-kernel:<bundle hash first 12>.
func Ref(b *images.Bundle) string { return "docker.io/library/" + kernelimage.KernelRef(b) }

// Image is a checked kernel image: present, of the right stub, unpacked.
type image struct {
	img    client.Image
	config ocispec.ImageConfig
}

// Check reports whether ref is in cli's namespace with bundle's hash as its config's
// kernelimage.LabelBundle. A missing image is ErrImageMissing, another hash ErrImageStale
// (both naming BuildCommand); other daemon errors are returned classified. It never pulls.
func Check(ctx context.Context, cli *client.Client, ref string, bundle *images.Bundle) (kernelimage.Status, error) {
	st, _, err := check(ctx, cli, ref, bundle)
	return st, err
}

func check(ctx context.Context, cli *client.Client, ref string, bundle *images.Bundle) (kernelimage.Status, image, error) {
	st := kernelimage.Status{Ref: ref, Want: bundle.Hash()}
	img, err := cli.GetImage(ctx, ref)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return st, image{}, fmt.Errorf("image %s: %w", ref, ErrImageMissing)
		}
		return st, image{}, fmt.Errorf("get image %s: %w", ref, classify(err))
	}
	st.ID = img.Target().Digest.String()
	spec, err := img.Spec(ctx)
	if err != nil {
		return st, image{}, fmt.Errorf("image %s config: %w", ref, classify(err))
	}
	st.Bundle = spec.Config.Labels[kernelimage.LabelBundle]
	if st.Bundle != st.Want {
		return st, image{}, fmt.Errorf("image %s has stub %.12q, this kennel's is %.12s: %w", ref, st.Bundle, st.Want, ErrImageStale)
	}
	return st, image{img: img, config: spec.Config}, nil
}

// ImportOptions say how ImportArchive stores the image.
type ImportOptions struct {
	// Ref is the image's name. Empty means Ref(bundle).
	Ref string
	// Snapshotter is the one the image is unpacked into. Empty means DefaultSnapshotter.
	Snapshotter string
}

// ImportArchive imports the kernel image from archive, the output of `docker save
// kennel-kernel:<hash>` (a Docker or OCI image archive), into cli's content store, names it
// o.Ref, and unpacks it into the snapshotter; then it checks it (Check). No registry is
// involved. Other images the archive holds are imported as well and left named as they
// are.
func ImportArchive(ctx context.Context, cli *client.Client, archive io.Reader, bundle *images.Bundle, o ImportOptions) (kernelimage.Status, error) {
	o.Ref = cmp.Or(o.Ref, Ref(bundle))
	o.Snapshotter = cmp.Or(o.Snapshotter, DefaultSnapshotter)
	ctx, done, err := cli.WithLease(ctx)
	if err != nil {
		return kernelimage.Status{Ref: o.Ref}, fmt.Errorf("import %s: lease: %w", o.Ref, classify(err))
	}
	defer done(context.WithoutCancel(ctx))
	imgs, err := cli.Import(ctx, archive, client.WithImageLabels(map[string]string{LabelKennel: "1", kernelimage.LabelBundle: bundle.Hash()}))
	if err != nil {
		return kernelimage.Status{Ref: o.Ref}, fmt.Errorf("import %s: %w: %w", o.Ref, kernelimage.ErrBuild, classify(err))
	}
	var names []string
	for _, im := range imgs {
		names = append(names, im.Name)
	}
	if !slices.Contains(names, o.Ref) {
		return kernelimage.Status{Ref: o.Ref}, fmt.Errorf("import %s: the archive names %q: %w", o.Ref, names, kernelimage.ErrBuild)
	}
	img, err := cli.GetImage(ctx, o.Ref)
	if err != nil {
		return kernelimage.Status{Ref: o.Ref}, fmt.Errorf("import %s: %w", o.Ref, classify(err))
	}
	if err := img.Unpack(ctx, o.Snapshotter); err != nil {
		return kernelimage.Status{Ref: o.Ref}, fmt.Errorf("unpack %s into %s: %w: %w", o.Ref, o.Snapshotter, kernelimage.ErrBuild, classify(err))
	}
	return Check(ctx, cli, o.Ref, bundle)
}

// ImportFromDocker is `kennel image build --containerd` once the Docker kernel image is
// built (kernelimage.Build): it streams `docker save kennel-kernel:<hash>` from the engine
// into ImportArchive. When cli already holds a current image it does nothing and reports
// imported false.
func ImportFromDocker(ctx context.Context, cli *client.Client, save func(ctx context.Context, ref string) (io.ReadCloser, error), bundle *images.Bundle, o ImportOptions) (st kernelimage.Status, imported bool, err error) {
	o.Ref = cmp.Or(o.Ref, Ref(bundle))
	if st, err := Check(ctx, cli, o.Ref, bundle); err == nil {
		return st, false, nil
	} else if !errors.Is(err, ErrImageMissing) && !errors.Is(err, ErrImageStale) {
		return st, false, err
	}
	rc, err := save(ctx, kernelimage.KernelRef(bundle))
	if err != nil {
		return kernelimage.Status{Ref: o.Ref}, false, fmt.Errorf("docker save %s: %w", kernelimage.KernelRef(bundle), err)
	}
	defer rc.Close()
	st, err = ImportArchive(ctx, cli, rc, bundle, o)
	return st, err == nil, err
}
