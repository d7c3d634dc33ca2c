package daemon

import (
	"context"
	"fmt"
	"sync"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/fshost"
	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/local"
	"github.com/kennel-dev/kennel/transports/wrapped"
)

// Setup is what a session's kernel runs on: built by a SetupFunc from a create request,
// completed and started by the daemon.
type Setup struct {
	// Transport starts the session's kernels. Required.
	Transport transports.Transport
	// SandboxDir is the working directory inside the sandbox ("" : the cwd itself).
	SandboxDir string
	// Env holds the kernel's extra environment entries, already mapped.
	Env []string
	// Handler serves the kernel's host requests (nil: none served).
	Handler controller.HostHandler
	// Release frees what the setup holds (a path map); called once when the session ends
	// or fails to start. Nil: nothing to free.
	Release func()
	// Warnings are logged once when the session starts.
	Warnings []string
}

// SetupFunc builds the Setup of a session whose working directory, already checked, is
// cwd. It must leave nothing held when it returns an error.
type SetupFunc func(ctx context.Context, cwd string, req *api.Transport) (*Setup, error)

// DefaultSetup returns the SetupFunc a daemon uses when Options.Setup is nil: a nil or
// "local" transport runs local kernels (one shared local.Transport, so the interpreter is
// resolved once) and "wrapped" runs them under its argv prefix; the path map is req's
// mounts or the identity map of cwd, and fs.* requests are served through it.
func DefaultSetup() SetupFunc {
	shared := sync.OnceValue(func() *local.Transport { return local.New(local.Options{}) })
	return func(ctx context.Context, cwd string, req *api.Transport) (*Setup, error) {
		kind := "local"
		var mounts []pathmap.Mount
		if req != nil {
			if req.Kind != "" {
				kind = req.Kind
			}
			for _, m := range req.PathMap {
				mounts = append(mounts, pathmap.Mount{Sandbox: m.Sandbox, Host: m.Host, ReadOnly: m.ReadOnly})
			}
		}
		var t transports.Transport
		switch kind {
		case "local":
			if req != nil && (len(req.ArgvPrefix) > 0 || len(mounts) > 0) {
				return nil, fmt.Errorf("transport local: %w: argv_prefix and path_map go with kind wrapped", errInvalid)
			}
			t = shared()
		case "wrapped":
			if len(req.ArgvPrefix) == 0 {
				return nil, fmt.Errorf("transport wrapped: %w: argv_prefix is required", errInvalid)
			}
			t = wrapped.New(wrapped.Options{ArgvPrefix: req.ArgvPrefix, Python: req.Python})
		default:
			return nil, fmt.Errorf("transport %q: %w: kind is local or wrapped", kind, errInvalid)
		}
		m, err := pathmap.New(pathmap.Config{Dir: cwd, Mounts: mounts})
		if err != nil {
			return nil, fmt.Errorf("path map: %w: %w", errInvalid, err)
		}
		return &Setup{
			Transport:  t,
			SandboxDir: m.Dir(),
			Handler:    fshost.New(m, fshost.Options{}),
			Release:    func() { _ = m.Close() },
		}, nil
	}
}
