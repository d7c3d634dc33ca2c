package containerd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"

	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/limits"
)

// DefaultPingTimeout bounds Connect's first contact with the daemon when
// ConnectOptions.PingTimeout is zero.
const DefaultPingTimeout = 3 * time.Second

// MinVersion is the oldest containerd the transport drives (Debian 12's is 1.6.20): its
// container, task, content, image, snapshot, lease and event services are all it uses,
// never the Transfer service, the Sandbox API or Introspection.PluginInfo.
const MinVersion = "1.6"

// ConnectOptions say which containerd Connect reaches.
type ConnectOptions struct {
	// Address is the daemon's socket. Empty means DefaultAddress.
	Address string
	// PingTimeout bounds the version call that checks the daemon answers. Zero means
	// DefaultPingTimeout; negative means ctx alone bounds it.
	PingTimeout time.Duration
}

// Connect returns a client of the containerd o names, in Namespace, once it answered a
// version call with MinVersion or later. A daemon that cannot be reached in time is an
// error matching transports.ErrUnavailable; one older than MinVersion, or one that answers
// a call with errdefs.ErrNotImplemented, an error reading "containerd too old: need ..."
// (also ErrUnavailable). Nothing is left open on error. The caller closes the client.
func Connect(ctx context.Context, o ConnectOptions) (*client.Client, error) {
	addr := cmp.Or(o.Address, DefaultAddress)
	cli, err := client.New(addr, client.WithDefaultNamespace(Namespace), client.WithDefaultRuntime(DefaultRuntime))
	if err != nil {
		return nil, fmt.Errorf("containerd %s: %w: %w", addr, transports.ErrUnavailable, err)
	}
	pctx, cancel := limits.Context(ctx, o.PingTimeout, DefaultPingTimeout)
	defer cancel()
	v, err := cli.Version(pctx)
	if err != nil {
		cli.Close()
		if cause := context.Cause(ctx); cause != nil {
			return nil, fmt.Errorf("containerd %s: %w", addr, cause)
		}
		if cerr := classify(err); errors.Is(cerr, transports.ErrUnavailable) {
			return nil, fmt.Errorf("containerd %s: %w", addr, cerr)
		}
		return nil, fmt.Errorf("containerd %s: %w: %w", addr, transports.ErrUnavailable, err)
	}
	if !atLeast(v.Version, MinVersion) {
		cli.Close()
		return nil, fmt.Errorf("containerd %s is %s: %w", addr, v.Version, errTooOld)
	}
	return cli, nil
}

var errTooOld = fmt.Errorf("containerd too old: need %s or later: %w", MinVersion, transports.ErrUnavailable)

// classify marks daemon errors that mean "cannot run here" as transports.ErrUnavailable:
// no daemon, a service it lacks (too old), a missing object.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if native := errgrpc.ToNative(err); native != nil && !errors.Is(err, native) {
		err = fmt.Errorf("%w: %w", native, err)
	}
	switch {
	case errdefs.IsNotImplemented(err):
		return fmt.Errorf("%w: %w", errTooOld, err)
	case errdefs.IsUnavailable(err), errdefs.IsNotFound(err), errdefs.IsDeadlineExceeded(err):
		return fmt.Errorf("%w: %w", transports.ErrUnavailable, err)
	}
	return err
}

// atLeast compares dotted versions ("1.6.20~ds1" against "1.6") by their leading numbers.
func atLeast(have, want string) bool {
	h, w := versionParts(have), versionParts(want)
	for i := range w {
		if i >= len(h) {
			return false
		}
		if h[i] != w[i] {
			return h[i] > w[i]
		}
	}
	return true
}

func versionParts(v string) []int {
	v = strings.TrimPrefix(v, "v")
	var out []int
	for _, p := range strings.Split(v, ".") {
		end := 0
		for end < len(p) && p[end] >= '0' && p[end] <= '9' {
			end++
		}
		n, err := strconv.Atoi(p[:end])
		if err != nil {
			break
		}
		out = append(out, n)
		if end < len(p) {
			break
		}
	}
	return out
}
