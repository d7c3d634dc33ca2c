// Package daemon is kennel's long-lived server (`kennel serve`): it owns many sessions and
// serves the HTTP API of package api on a unix socket only its own user can reach.
//
// Local access is checked in three layers, each on its own:
//
//   - the socket's directory (PrepareSocketDir): created 0700 when missing, and used only
//     when it is a real directory (not a symlink) owned by the daemon's uid with no group
//     or other write bit; otherwise the daemon does not start and a *SocketDirError names
//     the directory, the fault and the fix;
//   - the socket file (Listen): mode 0600 right after the bind, or the bind fails; a stale
//     socket of a dead daemon is replaced, a live daemon's is refused (ErrDaemonRunning);
//   - every connection's peer (PeerListener): its uid is read with SO_PEERCRED before any
//     byte is read, and a peer of another uid, or whose uid cannot be read, is closed
//     unread with a warning naming the uid.
//
// Every directory the daemon creates is made 0700 and every file 0600 at creation, and the
// state directory is checked and set to 0700 again at each start.
//
// A minimal daemon, as `kennel serve` runs it:
//
//	srv, err := daemon.New(daemon.Options{Socket: daemon.DefaultSocket(os.Getenv)})
//	if err != nil {
//		return err // a *SocketDirError, ErrDaemonRunning, ...
//	}
//	return srv.Serve(ctx) // until ctx ends; then a graceful shutdown
package daemon
