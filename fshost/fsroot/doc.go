// Package fsroot is the seam between kennel's fs.* handlers (package fshost) and the
// file systems they serve: Root, a tree of files named by sandbox paths and scoped to its
// served directories as an os.Root is scoped to one directory, and Error, the one coded
// error of what crosses to a kernel.
//
// Two implementations exist: pathmap.Map (local mounts, every open beneath a mount
// root's descriptor with openat2 RESOLVE_BENEATH) and ssh.FS (a remote workspace over
// SFTP, paths resolved by the server and checked to stay below the workspace). fshost
// writes fs.read, fs.write, fs.edit, fs.grep and fs.glob once over Root:
//
//	m, err := pathmap.New(pathmap.Config{Dir: dir})        // or hosts.OpenFS(ctx, "box:/src", ssh.FSOptions{})
//	if err != nil { ... }
//	info, err := m.Stat(ctx, "", "src/main.go")            // cwd "" is the session's
//	if errors.Is(err, fsroot.ErrOutside) { ... }            // refused: nothing was looked at outside
//	rc, info, err := m.Open(ctx, "", "src/main.go")        // a stream, info.Size its size
//	srv := fshost.New(m, fshost.Options{})                  // the handlers over either
//
// # Errors
//
// Every error a Root returns is an *Error: the operation, the sandbox path (never the
// host path behind it), and the protocol code (protocol/codes.go) the kernel gets, in
// Reason; a path refusal (outside, read_only) also carries Version "transport@1". Its
// chain holds exactly one class sentinel (ErrOutside, ErrNotFound, ...), so errors.Is
// decides, and each class is itself classed with github.com/containerd/errdefs
// (errdefs.IsNotFound, errdefs.IsInvalidArgument, errdefs.IsPermissionDenied, ...) for
// callers that speak that vocabulary, such as the daemon.
package fsroot
