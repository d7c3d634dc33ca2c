package kernelimage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
)

// DefaultSuite is the Debian release the base root file system is made from.
const DefaultSuite = "bookworm"

// DefaultCacheDir is where the debootstrapped root file system is kept as a tarball, so a
// second build does not fetch packages again.
const DefaultCacheDir = "/var/cache/kennel"

// ErrNoDebootstrap reports that debootstrap is not installed; the fix is
// `apt-get install debootstrap`.
var ErrNoDebootstrap = errors.New("debootstrap not found: install it with `apt-get install debootstrap`")

// ErrBadOption reports a builder option that is refused before anything runs.
var ErrBadOption = errors.New("bad image build option")

// RootfsOptions say how to make the base root file system.
type RootfsOptions struct {
	// Suite is the Debian release. Empty means DefaultSuite.
	Suite string
	// Mirror is the Debian mirror's base address. Empty means the one apt is configured
	// with on this machine (AptMirror("/", Suite)).
	Mirror string
	// CacheDir holds the tarball. Empty means DefaultCacheDir.
	CacheDir string
	// Log receives debootstrap's output. Nil discards it.
	Log io.Writer
}

var suiteRE = regexp.MustCompile(`^[a-z][a-z0-9.-]{0,63}$`)

func (o RootfsOptions) withDefaults() (RootfsOptions, error) {
	o.Suite = cmp.Or(o.Suite, DefaultSuite)
	if !suiteRE.MatchString(o.Suite) {
		return o, fmt.Errorf("suite %q: %w", o.Suite, ErrBadOption)
	}
	o.CacheDir = cmp.Or(o.CacheDir, DefaultCacheDir)
	if !filepath.IsAbs(o.CacheDir) {
		return o, fmt.Errorf("cache dir %q is not absolute: %w", o.CacheDir, ErrBadOption)
	}
	o.Log = cmp.Or(o.Log, io.Discard)
	return o, nil
}

// RootfsTarball returns the path of the cached tarball for suite under cacheDir (it may
// not exist yet).
func RootfsTarball(cacheDir, suite string) string {
	return filepath.Join(cacheDir, "rootfs-"+suite+"-minbase-python3.tar")
}

// Rootfs returns the path of a tarball of a minimal Debian root file system with python3:
// `debootstrap --variant=minbase --include=python3 SUITE DIR MIRROR`, without apt's
// package cache and lists, packed with numeric owners. A tarball already in the cache is
// used as it is (no network); otherwise it is made in a temporary directory beside it
// and renamed into place, so a crash never leaves a partial tarball under the final
// name. It needs root (debootstrap does).
func Rootfs(ctx context.Context, o RootfsOptions) (string, error) {
	o, err := o.withDefaults()
	if err != nil {
		return "", err
	}
	final := RootfsTarball(o.CacheDir, o.Suite)
	if fi, err := os.Stat(final); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
		return final, nil
	}
	if o.Mirror == "" {
		if o.Mirror, err = AptMirror("/", o.Suite); err != nil {
			return "", err
		}
	}
	deboot, err := exec.LookPath("debootstrap")
	if err != nil {
		return "", fmt.Errorf("base root file system: %w", ErrNoDebootstrap)
	}
	if err := os.MkdirAll(o.CacheDir, 0o755); err != nil {
		return "", fmt.Errorf("cache dir: %w", err)
	}
	tmp, err := os.MkdirTemp(o.CacheDir, ".rootfs-*")
	if err != nil {
		return "", fmt.Errorf("cache dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	root := filepath.Join(tmp, "root")
	fmt.Fprintf(o.Log, "debootstrap --variant=minbase --include=python3 %s %s %s\n", o.Suite, root, o.Mirror)
	cmd := exec.CommandContext(ctx, deboot, "--variant=minbase", "--include=python3", o.Suite, root, o.Mirror)
	cmd.Stdout, cmd.Stderr = o.Log, o.Log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("debootstrap %s from %s: %w", o.Suite, o.Mirror, err)
	}
	// Leave out what only apt needs; the image is never updated in place.
	for _, g := range []string{"var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*_*"} {
		matches, _ := filepath.Glob(filepath.Join(root, g))
		for _, m := range matches {
			_ = os.Remove(m)
		}
	}
	part := filepath.Join(tmp, "rootfs.tar")
	tar := exec.CommandContext(ctx, "tar", "--numeric-owner", "--one-file-system", "-C", root, "-cf", part, ".")
	tar.Stderr = o.Log
	if err := tar.Run(); err != nil {
		return "", fmt.Errorf("pack root file system: %w", err)
	}
	if err := os.Rename(part, final); err != nil {
		return "", fmt.Errorf("cache root file system: %w", err)
	}
	return final, nil
}
