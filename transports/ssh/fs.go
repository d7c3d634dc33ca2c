package ssh

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/pkg/sftp"
	xssh "golang.org/x/crypto/ssh"

	"github.com/kennel-dev/kennel/fshost"
	"github.com/kennel-dev/kennel/fshost/fsroot"
	"github.com/kennel-dev/kennel/ignore"
)

// ParseWorkspace splits a remote workspace "[user@]host:/path" into its target and its
// absolute remote path (cleaned).
func ParseWorkspace(s string) (target, dir string, err error) {
	i := strings.Index(s, ":/")
	if i <= 0 {
		return "", "", fmt.Errorf("parse workspace %q: want [user@]host:/path: %w", s, ErrInvalidTarget)
	}
	target, dir = s[:i], path.Clean(s[i+1:])
	if _, _, _, err := ParseTarget(target); err != nil {
		return "", "", fmt.Errorf("parse workspace %q: %w", s, err)
	}
	if strings.IndexByte(dir, 0) >= 0 {
		return "", "", fmt.Errorf("parse workspace %q: NUL in path: %w", s, ErrInvalidTarget)
	}
	return target, dir, nil
}

// FSOptions configure an FS. The zero value serves the workspace read-write with
// fshost's default bounds.
type FSOptions struct {
	// ReadOnly refuses every change below the workspace (fs.write, fs.edit) with
	// reason read_only; reads and searches still work.
	ReadOnly bool
	// Limits bound the replies of Serve (zero values are fshost's defaults).
	Limits fshost.Options
}

// FS is a remote workspace served over SFTP on the host's shared connection: an
// fsroot.Root, so fshost's handlers serve its fs.read, fs.write, fs.edit, fs.grep and
// fs.glob exactly as they serve local files (a read streams the file; nothing reads a
// whole file into memory but fs.edit, up to its 64 MiB bound). It is also the
// controller's HostHandler (Serves, Serve: fshost.New(fs, FSOptions.Limits)). Sandbox
// paths are the host's own (the kernel runs there): one directory, the workspace, at its
// real path.
//
// Every path the kernel names is resolved by the server (SFTP realpath, which follows
// every symlink; a dangling one is read and followed here, up to fsroot.MaxSymlinks); a
// result outside the workspace's real path is refused with reason "outside" before
// anything is opened, as is a cwd outside it. A missing tail (a file to create) is checked
// on its deepest existing ancestor. SFTP has no descriptor-relative open: a symlink
// swapped in between the check and the open on the host can still redirect that one
// open, and a FIFO swapped in for a regular file blocks the SFTP session. A kernel on the
// host can do that only to files it can already reach by itself, since it runs there as
// the same user. WalkDir skips .git and what .gitignore files ignore, as the local path
// map does; a directory (or .gitignore) swapped for a symlink after it was listed is
// listed (or read) where the symlink leads, and ReadFile still refuses what is not at its
// listed real path.
type FS struct {
	c        *sftp.Client
	root     string // the workspace's real path on the host
	readOnly bool
	srv      *fshost.Server
}

var _ fsroot.Root = (*FS)(nil)

// OpenFS opens the remote workspace "[user@]host:/path": an SFTP session on the host's
// shared connection. The workspace must exist and be a directory. Close ends the SFTP
// session (not the connection).
func (h *Hosts) OpenFS(ctx context.Context, workspace string, opts FSOptions) (*FS, error) {
	target, dir, err := ParseWorkspace(workspace)
	if err != nil {
		return nil, err
	}
	c, t, err := h.Client(ctx, target)
	if err != nil {
		return nil, fmt.Errorf("open workspace %s: %w", workspace, err)
	}
	sc, err := newSFTP(c)
	if err != nil {
		if errors.Is(err, ErrNoSFTP) {
			return nil, fmt.Errorf("open workspace %s: %s: %w", workspace, t, err)
		}
		return nil, fmt.Errorf("open workspace %s: sftp on %s: %w: %w", workspace, t, err, ErrUnreachable)
	}
	root, err := sc.RealPath(dir)
	if err == nil {
		var fi os.FileInfo
		if fi, err = sc.Stat(root); err == nil && !fi.IsDir() {
			err = errors.New("not a directory")
		}
	}
	if err != nil {
		sc.Close()
		return nil, fmt.Errorf("open workspace %s: %w: %w", workspace, err, fsroot.ErrNotFound)
	}
	f := &FS{c: sc, root: root, readOnly: opts.ReadOnly}
	f.srv = fshost.New(f, opts.Limits)
	return f, nil
}

// Root is the workspace's real path on the host.
func (f *FS) Root() string { return f.root }

// Close ends the SFTP session.
func (f *FS) Close() error { return f.c.Close() }

// Serves reports whether typ is one of the fs.* types fshost serves.
func (f *FS) Serves(typ string) bool { return f.srv.Serves(typ) }

// Serve answers one fs.* request as fshost.Server.Serve does, over this workspace.
func (f *FS) Serve(ctx context.Context, typ string, args json.RawMessage) (any, error) {
	return f.srv.Serve(ctx, typ, args)
}

// Stat resolves unsafePath on the host, following every symlink (fsroot.Root).
func (f *FS) Stat(ctx context.Context, cwd, unsafePath string) (fsroot.Info, error) {
	r, err := f.resolve(ctx, cwd, unsafePath, false)
	return r.info, err
}

// Lstat resolves unsafePath on the host without following its last component
// (fsroot.Root).
func (f *FS) Lstat(ctx context.Context, cwd, unsafePath string) (fsroot.Info, error) {
	r, err := f.resolve(ctx, cwd, unsafePath, true)
	return r.info, err
}

// Open opens the regular file unsafePath for reading: a stream over SFTP (fsroot.Root).
func (f *FS) Open(ctx context.Context, cwd, unsafePath string) (io.ReadCloser, fsroot.Info, error) {
	const op = "open"
	r, err := f.resolve(ctx, cwd, unsafePath, false)
	if err != nil {
		return nil, fsroot.Info{}, err
	}
	p := r.info.Path
	switch {
	case !r.info.Exists:
		return nil, fsroot.Info{}, fsroot.NewError(op, p, fsroot.ErrNotFound, nil)
	case r.info.IsDir():
		return nil, fsroot.Info{}, fsroot.NewError(op, p, fsroot.ErrInvalid, errors.New("is a directory"))
	case !r.info.IsRegular():
		return nil, fsroot.Info{}, fsroot.NewError(op, p, fsroot.ErrInvalid, errors.New("not a regular file"))
	}
	file, err := f.c.Open(p)
	if err != nil {
		return nil, fsroot.Info{}, sftpErr(op, p, err)
	}
	fi, err := file.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		file.Close()
		return nil, fsroot.Info{}, fsroot.NewError(op, p, fsroot.ErrChanged, errors.New("no longer a regular file"))
	}
	r.info.Size = fi.Size()
	return file, r.info, nil
}

// WriteFile replaces the file unsafePath: a temporary file beside it, synced where the
// server can (fsync@openssh.com), then posix-rename over it; missing parent directories
// are made inside the workspace, and removed again on failure. A replaced file keeps its
// mode and, where the server allows, its owner (fsroot.Root).
func (f *FS) WriteFile(ctx context.Context, cwd, unsafePath string, data []byte) (fsroot.Info, error) {
	const op = "write"
	r, err := f.resolve(ctx, cwd, unsafePath, false)
	if err != nil {
		return fsroot.Info{}, err
	}
	p := r.info.Path
	switch {
	case f.readOnly:
		return fsroot.Info{}, fsroot.NewError(op, p, fsroot.ErrReadOnly, nil)
	case r.info.IsDir():
		return fsroot.Info{}, fsroot.NewError(op, p, fsroot.ErrInvalid, errors.New("is a directory"))
	case r.info.Exists && !r.info.IsRegular():
		return fsroot.Info{}, fsroot.NewError(op, p, fsroot.ErrInvalid, errors.New("not a regular file"))
	}
	undo, err := f.makeParents(op, r)
	if err != nil {
		return fsroot.Info{}, err
	}
	mode, owner := os.FileMode(0o644), (*sftp.FileStat)(nil)
	if r.info.Exists {
		mode = r.mode.Perm()
		owner, _ = r.sys.(*sftp.FileStat)
	}
	tmp := path.Join(path.Dir(p), fmt.Sprintf(".kennel-tmp-%016x", rand.Uint64()))
	w, err := f.c.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL)
	if err != nil {
		undo()
		return fsroot.Info{}, sftpErr(op, p, err)
	}
	_, werr := w.Write(data)
	if werr == nil {
		werr = w.Chmod(mode)
	}
	if werr == nil && owner != nil {
		_ = w.Chown(int(owner.UID), int(owner.GID)) // best effort, as a path map without an Owner
	}
	if _, ok := f.c.HasExtension("fsync@openssh.com"); ok && werr == nil {
		werr = w.Sync()
	}
	if cerr := w.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = f.c.PosixRename(tmp, p)
	}
	if werr != nil {
		_ = f.c.Remove(tmp)
		undo()
		return fsroot.Info{}, sftpErr(op, p, werr)
	}
	return r.info, nil
}

// Rename moves the entry oldPath to newPath with SFTP rename, which does not replace an
// existing destination (fsroot.Root).
func (f *FS) Rename(ctx context.Context, cwd, oldPath, newPath string) error {
	const op = "rename"
	from, err := f.resolve(ctx, cwd, oldPath, true)
	if err != nil {
		return err
	}
	to, err := f.resolve(ctx, cwd, newPath, true)
	if err != nil {
		return err
	}
	fp, tp := from.info.Path, to.info.Path
	switch {
	case f.readOnly:
		return fsroot.NewError(op, fp, fsroot.ErrReadOnly, nil)
	case !from.info.Exists:
		return fsroot.NewError(op, fp, fsroot.ErrNotFound, nil)
	case to.info.Exists:
		return fsroot.NewError(op, tp, fsroot.ErrExists, nil)
	case strings.HasPrefix(tp, fp+"/"):
		return fsroot.NewError(op, tp, fsroot.ErrInvalid, errors.New("cannot move a directory into itself"))
	}
	undo, err := f.makeParents(op, to)
	if err != nil {
		return err
	}
	if err := f.c.Rename(fp, tp); err != nil {
		undo()
		if _, serr := f.c.Lstat(tp); serr == nil {
			return fsroot.NewError(op, tp, fsroot.ErrExists, nil)
		}
		return sftpErr(op, fp, err)
	}
	return nil
}

// WalkDir lists the tree at unsafePath over SFTP with ignore.WalkFS, the walk the local
// path map makes with ignore.Walk: names in byte order, .git skipped, what the tree's
// .gitignore files ignore skipped (the same rules, the same MaxFileSize bound on a
// .gitignore), symlinks reported and not entered (fsroot.Root). The walk reads a
// .gitignore only when the server lists it as a regular file; see FS for the races that
// remain.
func (f *FS) WalkDir(ctx context.Context, cwd, unsafePath string, fn func(fsroot.Entry) error) error {
	const op = "walk"
	r, err := f.resolve(ctx, cwd, unsafePath, false)
	if err != nil {
		return err
	}
	p := r.info.Path
	if !r.info.Exists {
		return fsroot.NewError(op, p, fsroot.ErrNotFound, nil)
	}
	if !r.info.IsDir() {
		err = fn(fsroot.Entry{Path: p, Rel: path.Base(p), Type: r.info.Type})
		if err == fs.SkipAll || err == fs.SkipDir {
			return nil
		}
		return err
	}
	var fnErr error // what fn returned to end the walk: returned as is
	err = ignore.WalkFS(ctx, sftpFS{ctx: ctx, c: f.c, dir: p}, ".", func(rel string, d fs.DirEntry) error {
		err := fn(fsroot.Entry{Path: join(p, rel), Rel: rel, Type: d.Type()})
		if err != nil && err != fs.SkipDir && err != fs.SkipAll {
			fnErr = err
		}
		return err
	})
	var pe *fs.PathError
	switch {
	case err == nil:
		return nil
	case fnErr != nil && err == fnErr:
		return err
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, ignore.ErrTooDeep):
		return fsroot.NewError(op, p, fsroot.ErrInvalid, ignore.ErrTooDeep)
	case errors.As(err, &pe) && path.IsAbs(pe.Path):
		return sftpErr(op, pe.Path, pe.Err) // the directory or .gitignore that failed
	}
	return sftpErr(op, p, err)
}

// sftpFS is the tree below the host directory dir as an fs.FS (and fs.ReadDirFS) for
// ignore.WalkFS: a name is a slash path below dir, opened or listed by the server as
// given (it follows symlinks on the way; the walk enters only what it listed as a
// directory). It carries the context of the one walk it serves, because fs.FS methods
// take none: a listing in progress ends when ctx does. Errors are *fs.PathError naming
// the host path.
type sftpFS struct {
	ctx context.Context
	c   *sftp.Client
	dir string
}

// path is the host path of the fs.FS name.
func (s sftpFS) path(op, name string) (string, error) {
	if !fs.ValidPath(name) {
		return "", &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if name == "." {
		return s.dir, nil
	}
	return join(s.dir, name), nil
}

// Open opens name for reading (fs.FS): an *sftp.File, whose Stat is an fstat.
func (s sftpFS) Open(name string) (fs.File, error) {
	p, err := s.path("open", name)
	if err != nil {
		return nil, err
	}
	if err := s.ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	file, err := s.c.Open(p)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return file, nil
}

// ReadDir lists the directory name with SFTP readdir, sorted by name (fs.ReadDirFS). The
// entries' types and Info are the server's lstat of each, sent with the listing.
func (s sftpFS) ReadDir(name string) ([]fs.DirEntry, error) {
	p, err := s.path("readdir", name)
	if err != nil {
		return nil, err
	}
	fis, err := s.c.ReadDirContext(s.ctx, p)
	if err != nil {
		if s.ctx.Err() != nil {
			err = s.ctx.Err()
		}
		return nil, &fs.PathError{Op: "readdir", Path: p, Err: err}
	}
	ents := make([]fs.DirEntry, 0, len(fis))
	for _, fi := range fis {
		if n := fi.Name(); n != "." && n != ".." && n != "" && !strings.Contains(n, "/") {
			ents = append(ents, fs.FileInfoToDirEntry(fi))
		}
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, nil
}

// ReadFile reads the regular file a walk listed, at most max bytes: e.Path must be a
// real path below the workspace (the server's realpath of it is itself, so no symlink
// was swapped in on the way) (fsroot.Root).
func (f *FS) ReadFile(ctx context.Context, e fsroot.Entry, buf []byte, max int) ([]byte, bool, error) {
	const op = "open"
	if err := fsroot.CheckPath(op, e.Path); err != nil {
		return buf[:0], false, err
	}
	p := e.Path
	if path.Clean(p) != p || !within(f.root, p) || p == f.root {
		return buf[:0], false, fsroot.NewError(op, p, fsroot.ErrOutside, nil)
	}
	if err := ctx.Err(); err != nil {
		return buf[:0], false, err
	}
	if real, err := f.c.RealPath(p); err != nil || real != p {
		return buf[:0], false, fsroot.NewError(op, p, fsroot.ErrChanged, nil)
	}
	file, err := f.c.Open(p)
	if err != nil {
		return buf[:0], false, sftpErr(op, p, err)
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return buf[:0], false, fsroot.NewError(op, p, fsroot.ErrInvalid, errors.New("not a regular file"))
	}
	b := bytes.NewBuffer(buf[:0])
	b.Grow(int(min(fi.Size(), int64(max)) + 1))
	if _, err := b.ReadFrom(io.LimitReader(file, int64(max)+1)); err != nil {
		return buf[:0], false, sftpErr("read", p, err)
	}
	if data := b.Bytes(); len(data) > max {
		return data[:max], true, nil
	}
	return b.Bytes(), false, nil
}

// newSFTP starts an SFTP client on c (what sftp.NewClient does), telling a host that
// refuses the subsystem (ErrNoSFTP) from a connection that failed.
func newSFTP(c *xssh.Client) (*sftp.Client, error) {
	sess, err := c.NewSession()
	if err != nil {
		return nil, err
	}
	if err := sess.RequestSubsystem("sftp"); err != nil {
		sess.Close()
		// A refused request is a reply, so the connection works: the host has no SFTP.
		if _, _, perr := c.SendRequest("keepalive@openssh.com", true, nil); perr == nil {
			return nil, fmt.Errorf("%w: the host refused it (%v); fs.* requests need sshd's \"Subsystem sftp\" line", ErrNoSFTP, err)
		}
		return nil, err
	}
	w, err := sess.StdinPipe()
	if err != nil {
		sess.Close()
		return nil, err
	}
	r, err := sess.StdoutPipe()
	if err != nil {
		sess.Close()
		return nil, err
	}
	sc, err := sftp.NewClientPipe(r, w)
	if err != nil {
		sess.Close()
		return nil, err
	}
	return sc, nil
}

// NoSFTP serves the fs.* requests of a kernel on a host without an SFTP subsystem: each
// is answered with code "unavailable", saying so. Cells run as anywhere else.
type NoSFTP struct {
	// Host names the host in the answers.
	Host string
}

// Serves reports whether typ is one of the fs.* types.
func (n NoSFTP) Serves(typ string) bool { return strings.HasPrefix(typ, "fs.") }

// Serve answers every request with an unavailable error naming SFTP.
func (n NoSFTP) Serve(context.Context, string, json.RawMessage) (any, error) {
	return nil, noSFTPError{host: n.Host}
}

type noSFTPError struct{ host string }

func (e noSFTPError) Error() string {
	return fmt.Sprintf("%s has no SFTP subsystem: fs.* requests reach a remote workspace through SFTP; ask its administrator for sshd's \"Subsystem sftp internal-sftp\"", e.host)
}
func (e noSFTPError) Code() string  { return "unavailable" }
func (e noSFTPError) Unwrap() error { return ErrNoSFTP }
