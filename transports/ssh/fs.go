package ssh

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/pkg/sftp"

	"github.com/kennel-dev/kennel/fshost"
	"github.com/kennel-dev/kennel/pathmap"
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

// FSOptions bounds what FS replies hold. Zero values mean fshost's defaults.
type FSOptions struct {
	// ReadMaxBytes and ReadMaxLines bound an fs.read reply.
	ReadMaxBytes int
	ReadMaxLines int
	// MaxFileBytes is the largest file fs.read reads (too_large beyond). Zero means 64 MiB.
	MaxFileBytes int64
}

// FS serves a remote workspace's fs.read and fs.write requests over SFTP on the host's
// shared connection. It implements the controller's HostHandler (Serves, Serve). Paths
// are the host's own (the kernel runs there): one mount, the workspace directory, at
// its real path.
//
// Every path the kernel names is resolved by the server (SFTP realpath, which follows
// every symlink); a result outside the workspace's real path is refused with reason
// "outside" before anything is opened. A missing tail (a file to create) is checked on
// its deepest existing ancestor. SFTP has no descriptor-relative open: a symlink swapped
// in between the check and the open on the host can still redirect that one open. A
// kernel on the host can do that only to files it can already reach by itself, since it
// runs there as the same user.
type FS struct {
	c    *sftp.Client
	root string // the workspace's real path on the host
	opts FSOptions
}

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
	sc, err := sftp.NewClient(c)
	if err != nil {
		return nil, fmt.Errorf("open workspace %s: sftp on %s: %w: %w", workspace, t, err, ErrUnreachable)
	}
	root, err := sc.RealPath(dir)
	if err == nil {
		var fi os.FileInfo
		if fi, err = sc.Stat(root); err == nil && !fi.IsDir() {
			err = fmt.Errorf("not a directory")
		}
	}
	if err != nil {
		sc.Close()
		return nil, fmt.Errorf("open workspace %s: %w: %w", workspace, err, pathmap.ErrNotFound)
	}
	if opts.ReadMaxBytes <= 0 {
		opts.ReadMaxBytes = fshost.DefaultReadMaxBytes
	}
	if opts.ReadMaxLines <= 0 {
		opts.ReadMaxLines = 2000
	}
	if opts.MaxFileBytes <= 0 {
		opts.MaxFileBytes = 64 << 20
	}
	return &FS{c: sc, root: root, opts: opts}, nil
}

// Root is the workspace's real path on the host.
func (f *FS) Root() string { return f.root }

// Close ends the SFTP session.
func (f *FS) Close() error { return f.c.Close() }

// Serves reports whether typ is fs.read or fs.write.
func (f *FS) Serves(typ string) bool { return typ == fshost.TypeRead || typ == fshost.TypeWrite }

// Serve answers one request (fshost.ReadArgs or fshost.WriteArgs as JSON) with the same
// result types as fshost.Server. Errors carry the protocol code (Code method) and, for
// refusals, reason and version (fshost.Describe).
func (f *FS) Serve(ctx context.Context, typ string, args json.RawMessage) (any, error) {
	switch typ {
	case fshost.TypeRead:
		var a fshost.ReadArgs
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, fsFail(typ, "", pathmap.ErrInvalid, "bad arguments")
		}
		return f.Read(ctx, a)
	case fshost.TypeWrite:
		var a fshost.WriteArgs
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, fsFail(typ, "", pathmap.ErrInvalid, "bad arguments")
		}
		return f.Write(ctx, a)
	}
	return nil, fsFail(typ, "", fshost.ErrUnserved, "")
}

func fsFail(op, p string, sentinel error, msg string) error {
	err := sentinel
	if msg != "" {
		err = fmt.Errorf("%s: %w", msg, sentinel)
	}
	code := "internal"
	var coded interface{ Code() string }
	if errors.As(sentinel, &coded) {
		code = coded.Code()
	}
	fe := &pathmap.FsError{Op: op, Path: p, Reason: code, Err: err}
	if code == "outside" || code == "read_only" {
		fe.Version = pathmap.Version
	}
	return fe
}

// within reports whether p is root or below it.
func within(root, p string) bool {
	return p == root || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}

// resolve turns the kernel's unsafePath (relative to cwd, or absolute) into a real path
// on the host inside the workspace, or a refusal. exists reports whether it names an
// existing entry.
func (f *FS) resolve(op, cwd, unsafePath string) (real string, exists bool, err error) {
	if unsafePath == "" || strings.IndexByte(unsafePath, 0) >= 0 || strings.IndexByte(cwd, 0) >= 0 || len(unsafePath) > pathmap.MaxPath {
		return "", false, fsFail(op, unsafePath, pathmap.ErrInvalid, "path is required, without NUL")
	}
	if strings.HasPrefix(unsafePath, "~") {
		return "", false, fsFail(op, unsafePath, pathmap.ErrOutside, "")
	}
	base := f.root
	if cwd != "" {
		if !path.IsAbs(cwd) {
			return "", false, fsFail(op, unsafePath, pathmap.ErrInvalid, "cwd is not absolute")
		}
		base = cwd
	}
	// Not cleaned by name: ".." after a symlink goes up from where the link leads, as in
	// the kernel, so the server resolves the path as written.
	p := unsafePath
	if !path.IsAbs(p) {
		p = strings.TrimSuffix(base, "/") + "/" + p
	}
	// The server resolves every symlink; a missing tail is checked on its deepest
	// existing ancestor.
	var tail []string
	cur := p
	for {
		r, rerr := f.c.RealPath(cur)
		if rerr == nil {
			if _, serr := f.c.Lstat(r); serr == nil {
				if !within(f.root, r) {
					return "", false, fsFail(op, unsafePath, pathmap.ErrOutside, "")
				}
				for i := len(tail) - 1; i >= 0; i-- {
					r = path.Join(r, tail[i])
				}
				return r, len(tail) == 0, nil
			}
		}
		// A dangling symlink here would lead elsewhere: refuse rather than create.
		if fi, lerr := f.c.Lstat(cur); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return "", false, fsFail(op, unsafePath, pathmap.ErrOutside, "dangling symlink")
		}
		trimmed := strings.TrimRight(cur, "/")
		i := strings.LastIndexByte(trimmed, '/')
		if i < 0 || trimmed == "" {
			return "", false, fsFail(op, unsafePath, pathmap.ErrNotFound, "")
		}
		name := trimmed[i+1:]
		if name == ".." {
			// ".." below a missing name: the kernel would not find it either.
			return "", false, fsFail(op, unsafePath, pathmap.ErrNotFound, "")
		}
		if name != "." && name != "" {
			tail = append(tail, name)
		}
		cur = trimmed[:i]
		if cur == "" {
			cur = "/"
		}
	}
}

// Read serves fs.read: a window of a text file's lines.
func (f *FS) Read(ctx context.Context, a fshost.ReadArgs) (*fshost.ReadResult, error) {
	const op = fshost.TypeRead
	if a.Offset < 0 || a.Limit < 0 {
		return nil, fsFail(op, a.Path, pathmap.ErrInvalid, "offset and limit must not be negative")
	}
	real, exists, err := f.resolve(op, a.Cwd, a.Path)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, fsFail(op, a.Path, pathmap.ErrNotFound, "")
	}
	file, err := f.c.Open(real)
	if err != nil {
		return nil, fsFail(op, a.Path, sftpClass(err), "")
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, fsFail(op, a.Path, pathmap.ErrInvalid, "not a regular file")
	}
	if fi.Size() > f.opts.MaxFileBytes {
		return nil, fsFail(op, a.Path, fshost.ErrTooLarge, "")
	}
	data, err := io.ReadAll(io.LimitReader(file, f.opts.MaxFileBytes+1))
	if err != nil {
		return nil, fsFail(op, a.Path, sftpClass(err), "")
	}
	head := data[:min(len(data), 8<<10)]
	if bytes.IndexByte(head, 0) >= 0 || !utf8.Valid(data) {
		return nil, fsFail(op, a.Path, fshost.ErrBinary, "")
	}
	lines := strings.SplitAfter(string(data), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	limit, capped := f.opts.ReadMaxLines, true
	if a.Limit > 0 && a.Limit <= limit {
		limit, capped = a.Limit, false
	}
	r := &fshost.ReadResult{Absolute: real, Offset: a.Offset, TotalLines: len(lines)}
	var b strings.Builder
	i := a.Offset
	for ; i < len(lines) && r.Lines < limit; i++ {
		if b.Len()+len(lines[i]) > f.opts.ReadMaxBytes {
			if r.Lines == 0 {
				b.WriteString(cutRunes(lines[i], f.opts.ReadMaxBytes))
				r.Lines, i = 1, i+1
			}
			r.Truncated = true
			break
		}
		b.WriteString(lines[i])
		r.Lines++
	}
	if capped && i < len(lines) {
		r.Truncated = true
	}
	r.Content = b.String()
	if r.Truncated {
		r.NextOffset = a.Offset + r.Lines
	}
	return r, nil
}

func cutRunes(s string, n int) string {
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:min(n, len(s))]
}

// Write serves fs.write: the whole file replaced atomically (a temporary file beside it,
// then posix-rename), parent directories created inside the workspace, an existing
// file's mode kept.
func (f *FS) Write(ctx context.Context, a fshost.WriteArgs) (*fshost.WriteResult, error) {
	const op = fshost.TypeWrite
	real, exists, err := f.resolve(op, a.Cwd, a.Path)
	if err != nil {
		return nil, err
	}
	mode := os.FileMode(0o644)
	if exists {
		fi, err := f.c.Stat(real)
		if err != nil {
			return nil, fsFail(op, a.Path, sftpClass(err), "")
		}
		if !fi.Mode().IsRegular() {
			return nil, fsFail(op, a.Path, pathmap.ErrInvalid, "not a regular file")
		}
		mode = fi.Mode().Perm()
	}
	dir := path.Dir(real)
	if err := f.c.MkdirAll(dir); err != nil {
		return nil, fsFail(op, a.Path, sftpClass(err), "")
	}
	tmp := path.Join(dir, "."+path.Base(real)+".kennel-"+runID("w"))
	w, err := f.c.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL)
	if err != nil {
		return nil, fsFail(op, a.Path, sftpClass(err), "")
	}
	_, werr := w.Write([]byte(a.Content))
	if werr == nil {
		werr = w.Chmod(mode)
	}
	if cerr := w.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = f.c.PosixRename(tmp, real)
	}
	if werr != nil {
		_ = f.c.Remove(tmp)
		return nil, fsFail(op, a.Path, sftpClass(werr), "")
	}
	return &fshost.WriteResult{Absolute: real, Bytes: len(a.Content), Created: !exists}, nil
}

// sftpClass maps an SFTP error to a pathmap class.
func sftpClass(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return pathmap.ErrNotFound
	case errors.Is(err, fs.ErrPermission):
		return pathmap.ErrDenied
	}
	return pathmap.ErrInternal
}
