package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// ErrDaemonRunning: the socket path holds the socket of a daemon that answers. The new
// daemon does not start.
var ErrDaemonRunning = errors.New("a kennel daemon is already serving this socket")

// ErrNotSocket: the socket path holds something other than a socket; the daemon does not
// remove it.
var ErrNotSocket = errors.New("socket path holds a file that is not a socket")

// Listen binds the daemon's unix socket at path: its directory is prepared and checked
// (PrepareSocketDir), a stale socket left by a daemon that is gone (a connect fails) is
// removed, a live one refuses the start (ErrDaemonRunning), and the new socket file is set
// to mode 0600 right after the bind, or the bind fails. The socket file is removed when
// the listener is closed.
//
// Between the bind and the chmod the file has the umask's mode; its directory, private
// by the check, is what keeps others out in that window.
func Listen(ctx context.Context, path string) (*net.UnixListener, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("listen %s: the socket path must be absolute", path)
	}
	if err := PrepareSocketDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	if err := clearStale(ctx, path); err != nil {
		return nil, err
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	l.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("listen %s: set mode 0600: %w", path, err)
	}
	return l, nil
}

// clearStale removes a socket at path that no daemon answers.
func clearStale(ctx context.Context, path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listen %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("listen %s: %w: remove it or give --socket another path", path, ErrNotSocket)
	}
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	if c, err := d.DialContext(dctx, "unix", path); err == nil {
		_ = c.Close()
		return fmt.Errorf("listen %s: %w", path, ErrDaemonRunning)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("listen %s: remove stale socket: %w", path, err)
	}
	return nil
}

// PeerListener accepts only connections whose peer runs as UID. Accept reads each peer's
// uid with SO_PEERCRED before any byte of the connection is read; a peer of another uid,
// or one whose uid cannot be read (not a unix socket, a failed getsockopt), is closed
// unread, logged as a warning naming its uid (-1 when unknown), counted, and Accept goes
// on to the next connection.
type PeerListener struct {
	net.Listener
	// UID is the only peer uid served.
	UID int
	// Logger receives a warning per refused peer. Nil discards them.
	Logger *slog.Logger
	// OnRefuse, when set, is called with each refused peer's uid (-1: unknown).
	OnRefuse func(uid int)

	refused atomic.Int64
}

// Refused counts the connections refused so far.
func (l *PeerListener) Refused() int64 { return l.refused.Load() }

// Accept returns the next connection of a peer of UID.
func (l *PeerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uid, err := PeerUID(c)
		if err == nil && uid == l.UID {
			return c, nil
		}
		// Counted and logged before the close, so a peer that sees its connection end
		// finds the refusal already recorded; no byte of it is read either way.
		l.refused.Add(1)
		if l.Logger != nil {
			l.Logger.Warn("refused a connection from another user", "uid", uid, "want_uid", l.UID, "err", err)
		}
		if l.OnRefuse != nil {
			l.OnRefuse(uid)
		}
		_ = c.Close()
	}
}

// PeerUID reads the uid of a unix-socket connection's peer with SO_PEERCRED, reading no
// byte of the connection. It returns -1 and an error when the uid cannot be read.
func PeerUID(c net.Conn) (int, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return -1, fmt.Errorf("peer uid: %T is not a unix socket", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("peer uid: %w", err)
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, fmt.Errorf("peer uid: %w", err)
	}
	if serr != nil {
		return -1, fmt.Errorf("peer uid: %w", serr)
	}
	return int(cred.Uid), nil
}
