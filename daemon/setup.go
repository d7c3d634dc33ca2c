package daemon

import (
	"context"

	"github.com/kennel-dev/kennel/launch"
	"github.com/kennel-dev/kennel/sessionspec"
)

// AssembleFunc is launch.Kit.Assemble: the one session assembly. A test may wrap it (to
// count kernel starts, say); the parts it returns are the daemon's to release.
type AssembleFunc func(ctx context.Context, spec *sessionspec.Transport, dir string) (*launch.Parts, error)

// DefaultFunc gives the transport of a session created without one, from the settings of
// the project at cwd (launch.FromSettings, for kennel serve), with warnings for the
// operator. An error refuses the session: a transport setting that cannot be used never
// falls back to a local kernel.
type DefaultFunc func(cwd string) (spec *sessionspec.Transport, warnings []string, err error)

// FromSettings is the DefaultFunc of kennel serve: the kernelTransport setting of the
// project at cwd.
func FromSettings(cwd string) (*sessionspec.Transport, []string, error) {
	spec, r, err := launch.FromSettings(cwd)
	return spec, launch.Problems(r), err
}
