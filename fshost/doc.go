// Package fshost serves a kernel's fs.* host requests (fs.read, fs.write, fs.edit,
// fs.grep, fs.glob) over a session's file system: an fsroot.Root, which is a local
// pathmap.Map or a remote workspace's ssh.FS. The handlers are written once, over that
// interface; where the files are is the Root's business.
//
// The kernel names sandbox paths; every path argument and the request's cwd go to the
// Root, which resolves them before a handler reads or writes anything, so a path outside
// every served directory (or one a symlink leads out of) is refused with reason
// "outside" and no handler runs, and a change below a read-only one with "read_only".
// Every path in a reply (absolute, destination, grep and glob results) is a sandbox path.
// A path map opens files beneath its mount's root descriptor (see pathmap), never by host
// path name; an ssh.FS checks every path the SFTP server resolves against its workspace.
//
// A controller plugs a Server in behind its frame gate:
//
//	srv := fshost.New(m, fshost.Options{})
//	if srv.Serves(req.Type) {
//		result, err := srv.Serve(ctx, req.Type, req.Args)
//		if err != nil {
//			reply.Status, reply.Error = "error", fshost.Describe(err) // code, message, reason, version
//		} else {
//			reply.Status, reply.Result = "ok", result // marshals to JSON
//		}
//	}
//
// Every error a Server returns is an *fsroot.Error whose Code is its protocol code:
// invalid, unserved, outside, read_only, not_found, binary, no_match, ambiguous, loop, and
// for rarer host conditions exists, cross_device, changed, denied, no_space (a full file
// system or used-up quota on fs.write or fs.edit: the file keeps its old content),
// too_large and internal; errors.Is matches its class (fsroot.ErrOutside, ...).
//
// Files and directories fs.write and fs.edit create belong to the path map's Owner
// (pathmap.Config.Owner): set it to the uid:gid the kernel's transport runs it as, and
// what the host writes for the kernel is owned like what the kernel writes itself. A
// replaced file keeps its own owner and mode. Nil leaves them the controller's.
//
//	m, err := pathmap.New(pathmap.Config{Dir: dir, Mounts: mounts, Owner: &pathmap.Owner{UID: 10001, GID: 10001}})
//	if err != nil { ... } // ErrDenied: kennel cannot chown (not root, no CAP_CHOWN)
//	srv := fshost.New(m, fshost.Options{})
//
// Replies are bounded (Options): fs.read returns at most 50 KiB and 2000 lines, saying
// whether it was cut and how many lines the file has; fs.grep at most 1000 matches and
// 50 KiB; fs.glob at most 1000 paths. What is read is bounded too: fs.read streams the
// file (one read below 16 MiB, 1 MiB chunks above, whatever its size, local or remote),
// fs.grep reads files up to 32 MiB whole and larger ones in chunks of whole lines, and
// only fs.edit holds a whole file, up to 64 MiB (too_large beyond). Text means UTF-8
// with no NUL byte in the first 8 KiB: fs.read and fs.edit refuse anything else with
// code binary, fs.grep skips it. fs.grep and fs.glob list trees with the Root's WalkDir:
// .git is skipped, symlinks are never entered, and what .gitignore files ignore is
// skipped, locally and remotely alike (ignore.Walk, ignore.WalkFS).
//
// File names that are not valid UTF-8 cannot travel exactly in JSON: a reply naming one
// carries U+FFFD in its place (encoding/json's rule), and a request cannot name one.
package fshost
