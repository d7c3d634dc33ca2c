// Package fshost serves a kernel's fs.* host requests (fs.read, fs.write, fs.edit,
// fs.grep, fs.glob) through a session's path map.
//
// The kernel names sandbox paths; every path argument and the request's cwd go through
// the pathmap.Map before a handler touches the disk, so a path outside every mount (or
// one a symlink leads out of) is refused with reason "outside" and no handler runs, and a
// change below a read-only mount with "read_only". Every path in a reply (absolute,
// destination, grep and glob results) is a sandbox path. Files are opened beneath their
// mount's root descriptor (see pathmap), never by host path name.
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
// Every error a Server returns has a Code method giving its protocol code: invalid,
// unserved, outside, read_only, not_found, binary, no_match, ambiguous, loop, and for
// rarer host conditions exists, cross_device, changed, denied, no_space (a full file
// system or used-up quota on fs.write or fs.edit: the file keeps its old content),
// too_large and internal.
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
// 50 KiB; fs.glob at most 1000 paths. Text means UTF-8 with no NUL byte in the first
// 8 KiB: fs.read and fs.edit refuse anything else with code binary, fs.grep skips it.
//
// File names that are not valid UTF-8 cannot travel exactly in JSON: a reply naming one
// carries U+FFFD in its place (encoding/json's rule), and a request cannot name one.
package fshost
