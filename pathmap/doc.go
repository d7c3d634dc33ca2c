// Package pathmap maps the paths a sandboxed kernel names to host paths across a fixed
// list of mounts, and refuses every path that leads outside them.
//
// A Mount is one host directory seen at a sandbox path, read-write or read-only. With no
// mounts, the session's working directory is mounted at its own absolute path (the
// identity map). The deepest mount holding a path maps it, in both directions.
//
//	m, err := pathmap.New(pathmap.Config{
//		Dir:    "/home/me/project",
//		Mounts: []pathmap.Mount{{Sandbox: "/work", Host: "/home/me/project"}},
//	})
//	if err != nil { ... } // e.g. the working directory is outside every mount
//	defer m.Close()
//	t, err := m.Resolve("/work", "src/main.go") // cwd, then the kernel's path
//	// t.Host() == "/home/me/project/src/main.go", t.Sandbox() == "/work/src/main.go"
//	f, err := t.Open()
//
// A Map is an fsroot.Root, the interface the fs.* handlers (fshost) are written over:
// Stat, Lstat, Open, WriteFile, Rename, WalkDir and ReadFile take the request's cwd and
// the kernel's path and do Resolve (or ResolveEntry) and the Target's operation in one
// call. WalkDir lists trees with Config.Walk, by default ignore.Walk (.git and what
// .gitignore files ignore are skipped).
//
//	rc, info, err := m.Open(ctx, "/work", "src/main.go") // info.Path "/work/src/main.go"
//
// # Refusals
//
// Every error is an *FsError (fsroot.Error, the one coded error kennel's file side has)
// with a protocol code (Code, Reason); its class is one of fsroot's (ErrOutside here is
// fsroot.ErrOutside), each also an errdefs class (errdefs.IsNotFound(ErrNotFound)). A path outside every
// mount, relative to the sandbox home ("~", "~user/x"), or whose walk on the host disk
// leaves the mounts is refused with reason "outside" and version "transport@1"
// (ErrOutside); a write below a read-only mount with "read_only" (ErrReadOnly). On a
// refusal nothing was opened, read or written. A write that finds the file system full
// or a quota used up fails with "no_space" (ErrNoSpace) and, like every failed write,
// leaves the old content and no partial file or new directory.
//
// "Outside" is decided on the host disk, not only on the names: Resolve walks the path one
// component at a time beneath the O_PATH descriptor of a mount's resolved root, reads every
// symlink it meets and follows it itself, so a symlink that points out of every mount, a
// chain of them, or a ".." after one is refused, while a symlink into another mount is
// followed into that mount. A symlink loop ends with ErrLoop after MaxSymlinks links.
//
// # Untrusted paths and the races that remain
//
// Every path from the sandbox is hostile and is named unsafePath here. It is never opened
// by name: each open is an openat2(2) beneath a mount root's descriptor with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS, of the path the walk
// resolved. So a component swapped for a symlink between the check and the use makes the
// open fail (ErrChanged; Map.Open resolves again a few times) instead of escaping, and a
// /proc magic link (/proc/self/root, /proc/<pid>/fd/N) is never crossed. Directories are
// created one mkdirat at a time beneath their parent's descriptor, and renames act on
// parent directory descriptors. Ownership is given with fchown on descriptors, never
// by name (see Ownership).
//
// What the mechanism cannot promise, in the spirit of filepath-securejoin's caveats:
//
//   - Within one mount, a concurrent rename can make an open reach a different file of the
//     same mount than the one checked (Target.Open then refuses when the inode differs).
//     It can never reach a file outside the mount's root.
//   - A mount root is pinned when the Map is made: renaming a mount's host directory
//     later does not move the mount, and the host path strings (Host, reverse mapping of
//     absolute symlink targets) describe the directory as it was found then.
//   - Tree walks (WalkDir) list names from a descriptor of the checked directory and
//     never follow symlinks; each file is opened again beneath the mount root, with no
//     symlink allowed on the way, before its bytes are read (ReadFile). A name listed
//     during a race may no longer exist when it is opened.
//   - A regular file swapped for a FIFO or a device between a walk and an open is opened
//     non-blocking and refused without being read; opening a device can still have the
//     device's own side effects.
//   - A directory made for a write is given to the Owner through the descriptor opened
//     after its mkdirat; no call makes and opens a directory at once, so a rename can put
//     another directory of the mount there in between. One that is not empty then is
//     refused (ErrChanged) and not handed over; an empty one swapped in is handed over
//     (whoever could move it there could as well have removed it and made their own).
//
// # Ownership
//
// With Config.Owner set, every file and directory the Map creates (WriteFile, Rename's
// parent directories) belongs to that uid:gid, given before the file is renamed into
// place, so it never appears under another owner. A replaced file keeps its own owner
// and mode: the atomic replace puts a new inode in its place, and keeping them makes it
// look like an in-place write (the operator's file stays the operator's). Owner needs
// CAP_CHOWN unless it is the controller's own uid and one of its groups: New refuses it
// otherwise (ErrDenied), and a chown that still fails fails the write. Nil Owner leaves
// new files the controller's, as a root controller's are root's.
//
//	m, err := pathmap.New(pathmap.Config{Dir: dir, Mounts: mounts, Owner: &pathmap.Owner{UID: 10001, GID: 10001}})
//
// # Hard links
//
// A hard link inside a mount to a file elsewhere is not an escape and is served like any
// file. A hard link names the same inode, not a path: it can only be made by someone with
// access to both places (and, with fs.protected_hardlinks, ownership of or write access
// to the file), so the mount exposes an inode that whoever made the link already chose to
// share. The sandbox cannot create one to a file it cannot already reach.
//
// # Semantics
//
// ".." goes up from where the walk is. In the kernel's own path, ".." at a mount's root
// goes to the parent in the sandbox's layout (the kernel sees the mount there); in a
// symlink's target it goes up through the host's directories, as the host resolves the
// link, so a relative link into a sibling mount works. An absolute symlink target is a
// host path. A sandbox path where a deeper mount sits always means that mount. A missing
// component ends the walk on disk; the rest becomes the Target's missing tail, which
// Target.WriteFile and Rename create as directories beneath the mount root. A trailing
// slash, or "." after a name, needs a directory there, as in the kernel (else reason
// not_found); ResolveEntry ignores a trailing slash.
package pathmap
