package kernelimage

import (
	"archive/tar"
	"bufio"
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/images"
)

// Dockerfile is the kernel image's Dockerfile (the repository's Dockerfile.kernel is the
// same text, checked by a test).
//
//go:embed kernel.Dockerfile
var Dockerfile string

// LabelBundle is the image label holding the stub's bundle hash.
const LabelBundle = "dev.kennel.bundle"

// StubDir is where the image holds the unpacked stub.
const StubDir = "/opt/kennel/stub"

// Python is the interpreter inside the image.
const Python = "/usr/bin/python3"

// BaseRef is the default tag of the imported base image.
const BaseRef = "kennel-base:" + DefaultSuite

// KernelRepo is the repository name of kernel images; the tag is the bundle hash's
// first 12 hex digits (KernelRef).
const KernelRepo = "kennel-kernel"

// BuildCommand is the command that builds the image; errors about a missing or stale
// image name it.
const BuildCommand = "kennel image build"

// ErrImageMissing reports that the kernel image is not in the engine. A session never
// pulls or builds: the fix is BuildCommand. Its class is errdefs.ErrUnavailable.
var ErrImageMissing = fmt.Errorf("kernel image missing: run `%s` once: %w", BuildCommand, cerrdefs.ErrUnavailable)

// ErrImageStale reports a kernel image of another stub version (its bundle label is not
// this binary's). Its class is errdefs.ErrUnavailable.
var ErrImageStale = fmt.Errorf("kernel image stale (another kennel version's stub): run `%s`: %w", BuildCommand, cerrdefs.ErrUnavailable)

// ErrBuild reports that the engine refused or failed a build or import step.
var ErrBuild = errors.New("image build failed")

// KernelRef returns the kernel image tag for bundle: kennel-kernel:<hash first 12>.
func KernelRef(b *images.Bundle) string { return KernelRepo + ":" + b.Hash()[:12] }

// Status is what Check found.
type Status struct {
	// Ref is the image reference checked.
	Ref string
	// ID is the image id, or "" when missing.
	ID string
	// Bundle is the image's bundle label, or "".
	Bundle string
	// Want is the bundle hash this binary's stub has.
	Want string
}

// Check reports whether ref is in the engine and carries bundle's hash. A missing image
// is ErrImageMissing, a label that differs ErrImageStale (both errors.Is-able and
// naming `kennel image build`); other engine errors are returned wrapped. It never pulls.
func Check(ctx context.Context, cli client.APIClient, ref string, bundle *images.Bundle) (Status, error) {
	st := Status{Ref: ref, Want: bundle.Hash()}
	res, err := cli.ImageInspect(ctx, ref)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return st, fmt.Errorf("image %s: %w", ref, ErrImageMissing)
		}
		return st, fmt.Errorf("inspect image %s: %w: %w", ref, cerrdefs.ErrUnavailable, err)
	}
	st.ID = res.ID
	if res.Config != nil {
		st.Bundle = res.Config.Labels[LabelBundle]
	}
	if st.Bundle != st.Want {
		return st, fmt.Errorf("image %s has stub %.12q, this kennel's is %.12s: %w", ref, st.Bundle, st.Want, ErrImageStale)
	}
	return st, nil
}

// BuildOptions say how to build the kernel image. The zero value builds the default.
type BuildOptions struct {
	// Rootfs makes the base root file system when the base image is missing.
	Rootfs RootfsOptions
	// Base is the base image's tag. Empty means BaseRef.
	Base string
	// Ref is the kernel image's tag. Empty means KernelRef(bundle).
	Ref string
	// Force rebuilds the kernel image (not the base) even when Ref exists with the
	// right label.
	Force bool
	// Log receives progress. Nil discards it.
	Log io.Writer
}

// Result says what Build did.
type Result struct {
	// Ref is the kernel image's tag; ID its id.
	Ref, ID string
	// BaseImported reports that the base image was imported from the root file system
	// tarball; KernelBuilt that the kernel image was built (false: it was current).
	BaseImported, KernelBuilt bool
}

// Build makes the kernel image for bundle through the Engine API, with no registry: if
// the kernel image exists with bundle's label (and not Force), it does nothing; if the
// base image is missing, it imports the root file system tarball (Rootfs: cached, or
// made with debootstrap from the apt mirror); then it builds Dockerfile with BASE and
// BUNDLE from a build context made here (the Dockerfile and the stub under stub/), tagged
// Ref. Running it twice builds once.
func Build(ctx context.Context, cli client.APIClient, bundle *images.Bundle, o BuildOptions) (Result, error) {
	o.Base = cmp.Or(o.Base, BaseRef)
	o.Ref = cmp.Or(o.Ref, KernelRef(bundle))
	o.Log = cmp.Or(o.Log, io.Discard)
	res := Result{Ref: o.Ref}
	if !o.Force {
		st, err := Check(ctx, cli, o.Ref, bundle)
		if err == nil {
			res.ID = st.ID
			fmt.Fprintf(o.Log, "kernel image %s is current (%s)\n", o.Ref, shortID(st.ID))
			return res, nil
		}
		if !errors.Is(err, ErrImageMissing) && !errors.Is(err, ErrImageStale) {
			return res, err
		}
	}
	if _, err := cli.ImageInspect(ctx, o.Base); err != nil {
		if !cerrdefs.IsNotFound(err) {
			return res, fmt.Errorf("inspect base image %s: %w", o.Base, err)
		}
		tarball, err := Rootfs(ctx, o.Rootfs)
		if err != nil {
			return res, err
		}
		if err := ImportBase(ctx, cli, tarball, o.Base, o.Log); err != nil {
			return res, err
		}
		res.BaseImported = true
	}
	id, err := buildKernel(ctx, cli, bundle, o)
	if err != nil {
		return res, err
	}
	res.ID, res.KernelBuilt = id, true
	return res, nil
}

// ImportBase imports the root file system tarball as image ref (ImageImport from a tar
// stream), with a label naming it kennel's base.
func ImportBase(ctx context.Context, cli client.APIClient, tarball, ref string, log io.Writer) error {
	f, err := os.Open(tarball)
	if err != nil {
		return fmt.Errorf("import base %s: %w", ref, err)
	}
	defer f.Close()
	fmt.Fprintf(log, "importing %s as %s\n", tarball, ref)
	rc, err := cli.ImageImport(ctx, client.ImageImportSource{Source: bufio.NewReaderSize(f, 1<<20), SourceName: "-"}, ref,
		client.ImageImportOptions{
			Message: "kennel base root file system (debootstrap minbase + python3)",
			Changes: []string{`LABEL dev.kennel.base=1`, `ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`, `CMD ["/bin/sh"]`},
		})
	if err != nil {
		return fmt.Errorf("import base %s: %w: %w", ref, ErrBuild, err)
	}
	defer rc.Close()
	if err := readProgress(rc, log); err != nil {
		return fmt.Errorf("import base %s: %w", ref, err)
	}
	return nil
}

func buildKernel(ctx context.Context, cli client.APIClient, bundle *images.Bundle, o BuildOptions) (string, error) {
	bctx, err := BuildContext(bundle)
	if err != nil {
		return "", err
	}
	base, hash := o.Base, bundle.Hash()
	fmt.Fprintf(o.Log, "building %s from %s (stub %s)\n", o.Ref, o.Base, hash[:12])
	resp, err := cli.ImageBuild(ctx, bytes.NewReader(bctx), client.ImageBuildOptions{
		Tags:        []string{o.Ref},
		Dockerfile:  "Dockerfile",
		BuildArgs:   map[string]*string{"BASE": &base, "BUNDLE": &hash},
		Remove:      true,
		ForceRemove: true,
		NetworkMode: "none",
		Labels:      map[string]string{LabelBundle: hash},
	})
	if err != nil {
		return "", fmt.Errorf("build %s: %w: %w", o.Ref, ErrBuild, err)
	}
	defer resp.Body.Close()
	if err := readProgress(resp.Body, o.Log); err != nil {
		return "", fmt.Errorf("build %s: %w", o.Ref, err)
	}
	st, err := Check(ctx, cli, o.Ref, bundle)
	if err != nil {
		return "", fmt.Errorf("after build: %w", err)
	}
	return st.ID, nil
}

// BuildContext returns the kernel image's build context as a tar archive: Dockerfile,
// and the stub's files under stub/ (directories 0755, files 0644, root-owned, a fixed
// time), so the same bundle gives the same bytes.
func BuildContext(bundle *images.Bundle) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(0, 0)
	if err := addFile(tw, "Dockerfile", []byte(Dockerfile), mtime); err != nil {
		return nil, err
	}
	dirs := map[string]bool{}
	for _, f := range bundle.Files() {
		p := path.Join("stub", f.Path)
		for d := path.Dir(p); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	ds := slices.Collect(maps.Keys(dirs))
	sortByDepth(ds)
	for _, d := range ds {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	for _, f := range bundle.Files() {
		if err := addFile(tw, path.Join("stub", f.Path), f.Data, mtime); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func addFile(tw *tar.Writer, name string, data []byte, mtime time.Time) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// sortByDepth orders directories parents first: by (depth, name).
func sortByDepth(ds []string) {
	slices.SortFunc(ds, func(a, b string) int {
		return cmp.Or(cmp.Compare(strings.Count(a, "/"), strings.Count(b, "/")), strings.Compare(a, b))
	})
}

// progress is one message of the engine's JSON progress stream.
type progress struct {
	Stream      string `json:"stream"`
	Status      string `json:"status"`
	Error       string `json:"error"`
	ErrorDetail *struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
	Aux json.RawMessage `json:"aux"`
}

// readProgress copies the engine's progress stream to log and returns the first error
// message in it as an ErrBuild.
func readProgress(r io.Reader, log io.Writer) error {
	dec := json.NewDecoder(r)
	for {
		var m progress
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("progress stream: %w: %w", ErrBuild, err)
		}
		switch {
		case m.Error != "" || m.ErrorDetail != nil:
			msg := m.Error
			if msg == "" {
				msg = m.ErrorDetail.Message
			}
			return fmt.Errorf("%w: %s", ErrBuild, msg)
		case m.Stream != "":
			io.WriteString(log, m.Stream)
		case m.Status != "":
			fmt.Fprintln(log, m.Status)
		}
	}
}

func shortID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	return id[:min(len(id), 12)]
}
