package workspaces

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// resolveBeneath makes openat2 refuse any symlink (and any escape) on the way to a path:
// a path inside a tree names what lies there, never what a link points at.
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// root is an open directory that paths are resolved beneath, without following symlinks.
type root struct {
	path string
	fd   int
}

// openRoot opens the directory at p for descriptor-relative access.
func openRoot(p string) (*root, error) {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	return &root{path: p, fd: fd}, nil
}

func (r *root) close() { unix.Close(r.fd) }

// abs returns the host path of rel.
func (r *root) abs(rel string) string { return filepath.Join(r.path, filepath.FromSlash(rel)) }

// openat2 opens rel beneath r with flags, following no symlink on the way.
func (r *root) openat2(rel string, flags int) (int, error) {
	for {
		fd, err := unix.Openat2(r.fd, rel, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: resolveBeneath})
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return fd, err
	}
}

// open opens the regular file rel for reading. A symlink anywhere on the way, or a
// non-regular file at rel (EINVAL), is an error.
func (r *root) open(rel string) (*os.File, error) {
	fd, err := r.openat2(rel, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: r.abs(rel), Err: err}
	}
	f := os.NewFile(uintptr(fd), r.abs(rel))
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		if err == nil {
			err = syscall.EINVAL
		}
		return nil, &fs.PathError{Op: "open", Path: r.abs(rel), Err: err}
	}
	return f, nil
}

// dirOf opens the directory holding rel and returns it with rel's last element. The
// caller closes the descriptor unless it is r.fd.
func (r *root) dirOf(rel string) (int, string, error) {
	dir, name := path.Split(rel)
	if dir == "" {
		return r.fd, name, nil
	}
	fd, err := r.openat2(dir, unix.O_PATH|unix.O_DIRECTORY)
	return fd, name, err
}

// lstat returns the status of rel itself, following no symlink on the way.
func (r *root) lstat(rel string) (unix.Stat_t, error) {
	var st unix.Stat_t
	dfd, name, err := r.dirOf(rel)
	if err == nil {
		err = unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if dfd != r.fd {
			unix.Close(dfd)
		}
	}
	if err != nil {
		return st, &fs.PathError{Op: "lstat", Path: r.abs(rel), Err: err}
	}
	return st, nil
}

// readlink returns the target of the symlink rel, following no symlink on the way.
func (r *root) readlink(rel string) (string, error) {
	dfd, name, err := r.dirOf(rel)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: r.abs(rel), Err: err}
	}
	if dfd != r.fd {
		defer unix.Close(dfd)
	}
	target, err := readlinkAt(dfd, name)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: r.abs(rel), Err: err}
	}
	return target, nil
}

// absent reports whether err says a path does not exist as asked: missing, or a file or
// symlink where one of its directories goes.
func absent(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EXDEV)
}

// kindOf returns the Kind of a st_mode.
func kindOf(mode uint32) Kind {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return KindFile
	case unix.S_IFLNK:
		return KindSymlink
	case unix.S_IFDIR:
		return KindDir
	}
	return KindOther
}

// permOf returns the permission bits (with setuid, setgid, sticky) of a st_mode as an
// fs.FileMode.
func permOf(mode uint32) fs.FileMode {
	m := fs.FileMode(mode & 0o777)
	if mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// fingerprint is what a stat says about a file's identity: equal fingerprints at two
// times mean the file was not written in between (the ctime moves on every change).
type fingerprint struct {
	Dev, Ino     uint64
	Size         int64
	Mtime, Ctime int64 // nanoseconds
	Mode         uint32
}

func fingerprintOf(st *unix.Stat_t) fingerprint {
	return fingerprint{
		Dev: st.Dev, Ino: st.Ino, Size: st.Size, Mode: st.Mode,
		Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(),
	}
}

// copyFd fills the file dst (empty, open for writing at offset 0) with the bytes of the
// file src (read from offset 0, whatever its file offset): a clone of its extents
// (FICLONE) where the file system can, else an in-kernel byte copy (copy_file_range),
// else read and write. When noClone is set no clone is tried; a refusal that says the
// file systems cannot clone sets it (for a run between the same two file systems the
// answer does not change).
func copyFd(dst, src int, noClone *atomic.Bool) (cloned bool, err error) {
	if noClone == nil || !noClone.Load() {
		err := unix.IoctlFileClone(dst, src)
		for err == unix.EINTR {
			err = unix.IoctlFileClone(dst, src)
		}
		if err == nil {
			return true, nil
		}
		if noClone != nil && (err == unix.EOPNOTSUPP || err == unix.EXDEV || err == unix.ENOTTY || err == unix.ENOSYS) {
			noClone.Store(true)
		}
	}
	var off int64
	for {
		n, err := unix.CopyFileRange(src, &off, dst, nil, 1<<30, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			if off == 0 && (err == unix.ENOSYS || err == unix.EXDEV || err == unix.EINVAL || err == unix.EOPNOTSUPP) {
				break
			}
			return false, err
		}
		if n == 0 {
			return false, nil
		}
	}
	// copy_file_range refused before copying anything: read and write.
	buf := make([]byte, 128<<10)
	for off = 0; ; {
		n, err := unix.Pread(src, buf, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, err
		}
		if n == 0 {
			return false, nil
		}
		for w := 0; w < n; {
			m, err := unix.Write(dst, buf[w:n])
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return false, err
			}
			w += m
		}
		off += int64(n)
	}
}

// sameBytes reports whether the files a and b hold the same bytes, reading both to the
// first difference. read, when not nil, is told of every read.
func sameBytes(a, b *os.File, read func(name string, n int)) (bool, error) {
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, ea := io.ReadFull(a, ba)
		nb, eb := io.ReadFull(b, bb)
		if read != nil {
			read(a.Name(), na)
			read(b.Name(), nb)
		}
		if ea != nil && ea != io.EOF && ea != io.ErrUnexpectedEOF {
			return false, fmt.Errorf("read %s: %w", a.Name(), ea)
		}
		if eb != nil && eb != io.EOF && eb != io.ErrUnexpectedEOF {
			return false, fmt.Errorf("read %s: %w", b.Name(), eb)
		}
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		if ea != nil {
			return true, nil
		}
	}
}

// digestOf returns the SHA-256 of what is left to read of f, telling read of each read.
func digestOf(f *os.File, read func(name string, n int)) ([sha256.Size]byte, error) {
	h := sha256.New()
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		if read != nil && n > 0 {
			read(f.Name(), n)
		}
		h.Write(buf[:n])
		if err == io.EOF {
			var d [sha256.Size]byte
			h.Sum(d[:0])
			return d, nil
		}
		if err != nil {
			return [sha256.Size]byte{}, fmt.Errorf("read %s: %w", f.Name(), err)
		}
	}
}

// writeAtomic writes data to name through a temporary file beside it, then one rename: a
// reader sees the old file or the whole new one. With durable, the file and its directory
// are synced too, so the new file also survives a power loss.
func writeAtomic(name string, data []byte, durable bool) error {
	tmp := name + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	_, err = f.Write(data)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", name, err)
	}
	if !durable {
		return nil
	}
	if d, err := os.Open(filepath.Dir(name)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// at runs fn with the directory holding rel (opened beneath r, no symlink on the way) and
// rel's last element.
func (r *root) at(rel string, fn func(dfd int, name string) error) error {
	dfd, name, err := r.dirOf(rel)
	if err != nil {
		return err
	}
	if dfd != r.fd {
		defer unix.Close(dfd)
	}
	return fn(dfd, name)
}

// remove unlinks the file or symlink rel, or removes the empty directory rel when dir.
func (r *root) remove(rel string, dir bool) error {
	flags := 0
	if dir {
		flags = unix.AT_REMOVEDIR
	}
	err := r.at(rel, func(dfd int, name string) error { return unix.Unlinkat(dfd, name, flags) })
	if err != nil {
		return &fs.PathError{Op: "remove", Path: r.abs(rel), Err: err}
	}
	return nil
}

// mkdir makes the directory rel with mode.
func (r *root) mkdir(rel string, mode fs.FileMode) error {
	err := r.at(rel, func(dfd int, name string) error {
		if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
			return err
		}
		return unix.Fchmodat(dfd, name, uint32(mode.Perm()), 0)
	})
	if err != nil {
		return &fs.PathError{Op: "mkdir", Path: r.abs(rel), Err: err}
	}
	return nil
}

// futimens sets the access and modification times of the open file fd (utimensat with a
// NULL path: no path lookup).
func futimens(fd int, atime, mtime unix.Timespec) error {
	ts := [2]unix.Timespec{atime, mtime}
	_, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
