package settings

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/containerd/errdefs"
)

// LoadOptions says which files Load reads.
type LoadOptions struct {
	// GlobalDir is the global config directory; "" means GlobalDir().
	GlobalDir string
	// ProjectDir is the project's root directory; "" loads no project file.
	ProjectDir string
}

// Result is what Load found: the settings in effect and every problem on the way.
type Result struct {
	// Settings are the values in effect: the global file's, then each key the project
	// may set replaced whole by the project's entry.
	Settings Settings
	// From names, for each key set, the file its value came from.
	From map[string]string
	// GlobalFile and ProjectFile are the files read ("" for no project).
	GlobalFile, ProjectFile string
	// Trusted reports that the global trustedProjects names the project.
	Trusted bool
	// Problems lists every bad leaf, undeclared key, unreadable file and withheld key,
	// global file first. Each matches ErrBadValue, ErrUndeclared, ErrUnreadable or
	// ErrWithheld.
	Problems []*Problem
}

// Load reads the global settings file and the project's, applies the trust rules and
// returns the settings in effect. It fails only when the global directory cannot be
// found; every problem with the files is in Result.Problems.
//
// A project is trusted when the global trustedProjects names its directory (compared
// with symlinks resolved). An untrusted project's keys that run code or are limits are
// withheld, each with an ErrWithheld problem that names the key and the fix; a
// global-only key in any project is withheld too. A file that cannot be read applies
// nothing (an unreadable global file leaves every project untrusted).
func Load(opts LoadOptions) (*Result, error) {
	dir := opts.GlobalDir
	if dir == "" {
		var err error
		if dir, err = GlobalDir(); err != nil {
			return nil, err
		}
	}
	r := &Result{GlobalFile: filepath.Join(dir, FileName), From: map[string]string{}}
	global, _ := r.loadFile(r.GlobalFile)
	r.Settings = global
	for _, k := range keys {
		if k.isSet(&global) {
			r.From[k.ID] = r.GlobalFile
		}
	}
	if opts.ProjectDir == "" {
		return r, nil
	}
	pf, err := ProjectFile(opts.ProjectDir)
	if err != nil {
		return nil, err
	}
	r.ProjectFile = pf
	r.Trusted = trusts(global.TrustedProjects, filepath.Dir(filepath.Dir(pf)))
	project, _ := r.loadFile(pf)
	for _, k := range keys {
		if !k.isSet(&project) {
			continue
		}
		if why := r.withhold(k); why != nil {
			r.Problems = append(r.Problems, &Problem{File: pf, Pointer: child("", k.ID), Err: why})
			continue
		}
		k.copyTo(&r.Settings, &project)
		r.From[k.ID] = pf
	}
	return r, nil
}

// Value returns the value in effect of the declared key id (the field of Settings it
// sets, as JSON encodes it) and true, or nil and false when no file sets it (its Default
// applies) or no key id is declared.
func (r *Result) Value(id string) (any, bool) {
	k := lookup(id)
	if k == nil || !k.isSet(&r.Settings) {
		return nil, false
	}
	return k.value(&r.Settings), true
}

// loadFile reads one file, recording its problems; it reports whether the file was read.
func (r *Result) loadFile(file string) (Settings, bool) {
	root, _, err := readDocument(file)
	if err != nil {
		r.Problems = append(r.Problems, &Problem{File: file, Err: err})
		return Settings{}, false
	}
	s, problems := decodeDocument(file, root)
	r.Problems = append(r.Problems, problems...)
	return s, true
}

// withhold says why a project's entry of k does not apply, or nil.
func (r *Result) withhold(k *Key) error {
	switch {
	case k.Scope == GlobalOnly:
		return fmt.Errorf("%w: %s is global-only; set it in %s", ErrWithheld, k.ID, r.GlobalFile)
	case r.Trusted || !k.guarded():
		return nil
	}
	what := "sets a limit"
	if k.RunsCode {
		what = "runs code"
	}
	return fmt.Errorf("%w: %s %s and the project %s is not trusted; add %q to trustedProjects in %s to apply it",
		ErrWithheld, k.ID, what, filepath.Dir(filepath.Dir(r.ProjectFile)), filepath.Dir(filepath.Dir(r.ProjectFile)), r.GlobalFile)
}

// trusts reports whether list names dir, comparing cleaned paths and, where they exist,
// their symlink-resolved forms.
func trusts(list []string, dir string) bool {
	forms := func(p string) []string {
		out := []string{filepath.Clean(p)}
		if real, err := filepath.EvalSymlinks(p); err == nil {
			out = append(out, real)
		}
		return out
	}
	want := forms(dir)
	for _, p := range list {
		for _, f := range forms(p) {
			if slices.Contains(want, f) {
				return true
			}
		}
	}
	return false
}

// ErrTransportUnknown reports that a settings file that could set kernelTransport could
// not be read: the transport it names is unknown, so no kernel may start.
var ErrTransportUnknown = errdefs.ErrFailedPrecondition.WithMessage("kernel transport unknown")

// KernelTransport returns the kernelTransport in effect: nil means local kernels. It
// fails closed: when a file that could set it is unreadable (the global file, or a
// trusted project's), or the unit in effect has a bad field or cannot start a kernel
// (sessionspec's Validate), it returns an error (sessionspec.ErrInvalid or
// ErrTransportUnknown) and no unit, and the caller must not start a kernel, locally or
// elsewhere.
func (r *Result) KernelTransport() (*KernelTransport, error) {
	for _, p := range r.Problems {
		if p.Pointer == "" && errors.Is(p.Err, ErrUnreadable) && (p.File == r.GlobalFile || r.Trusted) {
			return nil, fmt.Errorf("kernel transport: %w: %w", ErrTransportUnknown, p)
		}
	}
	kt := r.Settings.KernelTransport
	if kt == nil {
		return nil, nil
	}
	if err := r.Settings.kernelTransportErr; err != nil {
		return nil, fmt.Errorf("kernel transport from %s: %w", r.From["kernelTransport"], err)
	}
	if err := kt.Validate(); err != nil {
		return nil, fmt.Errorf("kernel transport from %s: %w", r.From["kernelTransport"], err)
	}
	return kt, nil
}
