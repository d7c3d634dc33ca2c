package ssh

import (
	"errors"
	"fmt"

	"github.com/kennel-dev/kennel/transports"
)

// The error classes of this package, checked with errors.Is. Every error a Hosts or a
// Transport returns for a host it cannot use wraps one of them (and, for the first
// four, transports.ErrUnavailable as well).
var (
	// ErrNeedsAuth: a person could get in but kennel cannot on its own: the server refused
	// every key, an identity file needs a passphrase, the host key is unknown in strict
	// mode or has changed. The error's text says what to do.
	ErrNeedsAuth = fmt.Errorf("needs authentication: %w", transports.ErrUnavailable)
	// ErrUnreachable: no ssh conversation could be had (refused, timed out, no route, a
	// name that does not resolve, a jump host out of reach, a connection that dropped).
	ErrUnreachable = fmt.Errorf("unreachable: %w", transports.ErrUnavailable)
	// ErrConnectionLost: a connection that was up ended without kennel closing it (the
	// peer closed it or reset it, or it went unanswered past the keepalive bound). The
	// error names the connection (user@host:port) and its fault. It also matches
	// ErrUnreachable.
	ErrConnectionLost = fmt.Errorf("connection lost: %w", ErrUnreachable)
	// ErrUnsupported: the host answered, but it cannot run kernels (no python3, or one
	// older than MinPython).
	ErrUnsupported = fmt.Errorf("unsupported host: %w", transports.ErrUnavailable)
	// ErrHostKeyChanged: the host offered a key other than the one known_hosts holds for
	// it. It also matches ErrNeedsAuth.
	ErrHostKeyChanged = fmt.Errorf("host key changed: %w", ErrNeedsAuth)
	// ErrNoSFTP: the host serves no SFTP subsystem, so its files cannot be reached for
	// fs.* requests; cells still run there (see NoSFTP).
	ErrNoSFTP = fmt.Errorf("no SFTP subsystem: %w", transports.ErrUnavailable)
	// ErrInvalidTarget: a target that is not [user@]host[:port], or a workspace that is not
	// [user@]host:/path.
	ErrInvalidTarget = errors.New("invalid ssh target")
	// ErrKeepalive: the fault of a connection closed because no keepalive was answered
	// within Hosts.KeepAliveTimeout (the peer is silent: stopped, or the path to it is
	// gone). Errors with it match ErrConnectionLost too.
	ErrKeepalive = errors.New("keepalive: no answer")
	// ErrRemote: a remote command kennel runs failed on the host (its exit status and
	// what it said on stderr are in the message).
	ErrRemote = errors.New("remote command failed")
)
