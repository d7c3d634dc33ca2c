package workspaces

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// pageSize is the size of a page of the page cache.
var pageSize = os.Getpagesize()

// copyBatch is the most files of one directory a copy job takes: a large directory is
// shared by several workers.
const copyBatch = 256

// copier copies the listed paths of a Create from the parent into the workspace's base
// and the child's copy. It works directory by directory: a job opens the parent's
// directory (beneath the parent, no symlink on the way) and the two copies' directories
// once, then each file by its name alone. Each file of the parent is opened once and
// cloned into the child's copy from that one descriptor (created with its final mode, it
// gets the parent's times through its descriptor). The base of a file of at most
// digestMax bytes that are all in the page cache is their SHA-256, read before the clone
// (a digest costs a fraction of a file's creation); any other file is cloned into the
// base too, which keeps bytes only (0600, no times).
type copier struct {
	src, base, work *root
	paths           []string
	workers         int
	digestMax       int64 // negative: no digests
	report          *reporter

	dirs    []string          // every directory above a listed path, sorted
	dirMode map[string]uint32 // the directories made in both copies, with the parent's mode bits
	jobs    []copyJob

	entries                  []mentry // by index into paths
	kept                     []bool   // whether entries[i] was copied
	cloned, copied, digested atomic.Int64
	noClone                  atomic.Bool // set once the file system refused a clone
}

// copyJob is up to copyBatch files of one directory.
type copyJob struct {
	dir   string // slash path, "" for the top
	files []int  // indexes into copier.paths
}

// newCopier makes the base and the child's copy's top directories under dir (0700) and
// opens them.
func newCopier(src *root, dir string, paths []string, workers int, digestMax int64, report *reporter) (*copier, error) {
	c := &copier{src: src, paths: paths, workers: workers, digestMax: digestMax, report: report,
		entries: make([]mentry, len(paths)), kept: make([]bool, len(paths))}
	for _, t := range []struct {
		r    **root
		name string
	}{{&c.base, baseName}, {&c.work, workName}} {
		p := filepath.Join(dir, t.name)
		if err := os.Mkdir(p, 0o700); err != nil {
			c.close()
			return nil, err
		}
		r, err := openRoot(p)
		if err != nil {
			c.close()
			return nil, err
		}
		*t.r = r
	}
	return c, nil
}

// close closes the copies' directories (not src).
func (c *copier) close() {
	for _, r := range []*root{c.base, c.work} {
		if r != nil {
			r.close()
		}
	}
}

// makeDirs makes, in path order, every directory above a listed path in both copies
// (0700 for now), when the parent still has it as a directory, and groups the files into
// jobs. A file whose directory was not made is left out.
func (c *copier) makeDirs() error {
	seen := map[string]bool{}
	for _, p := range c.paths {
		for i := strings.LastIndexByte(p, '/'); i > 0; i = strings.LastIndexByte(p[:i], '/') {
			if seen[p[:i]] {
				break
			}
			seen[p[:i]] = true
		}
	}
	c.dirs = slices.Sorted(maps.Keys(seen))
	c.dirMode = make(map[string]uint32, len(c.dirs))
	for _, d := range c.dirs {
		if i := strings.LastIndexByte(d, '/'); i > 0 {
			if _, ok := c.dirMode[d[:i]]; !ok {
				continue // its own directory was not made
			}
		}
		st, err := c.src.lstat(d)
		if err != nil || kindOf(st.Mode) != KindDir {
			continue // gone or no longer a directory: its files are left out
		}
		for _, t := range []*root{c.base, c.work} {
			if err := unix.Mkdirat(t.fd, d, 0o700); err != nil {
				return &fs.PathError{Op: "mkdir", Path: t.abs(d), Err: err}
			}
		}
		c.dirMode[d] = st.Mode & 0o7777
	}
	byDir := map[string][]int{}
	for i, p := range c.paths {
		d := ""
		if k := strings.LastIndexByte(p, '/'); k > 0 {
			d = p[:k]
			if _, ok := c.dirMode[d]; !ok {
				continue
			}
		}
		byDir[d] = append(byDir[d], i)
	}
	for _, d := range slices.Sorted(maps.Keys(byDir)) {
		files := byDir[d]
		for len(files) > 0 {
			n := min(len(files), copyBatch)
			c.jobs = append(c.jobs, copyJob{dir: d, files: files[:n:n]})
			files = files[n:]
		}
	}
	return nil
}

// copyFiles runs the jobs on c.workers goroutines; the first error ends them all.
func (c *copier) copyFiles(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(c.workers, len(c.jobs)) {
		wg.Go(func() {
			var buf []byte
			if c.digestMax >= 0 {
				buf = make([]byte, c.digestMax)
			}
			for ctx.Err() == nil {
				j := int(next.Add(1)) - 1
				if j >= len(c.jobs) {
					return
				}
				if err := c.copyDir(&c.jobs[j], buf); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// copyDir copies the files of one job; buf (digestMax bytes) holds a file to digest.
func (c *copier) copyDir(j *copyJob, buf []byte) error {
	fds := [3]int{c.src.fd, c.base.fd, c.work.fd}
	if j.dir != "" {
		for k, r := range []*root{c.src, c.base, c.work} {
			fd, err := r.openat2(j.dir, unix.O_PATH|unix.O_DIRECTORY)
			if err != nil {
				for _, fd := range fds[:k] {
					unix.Close(fd)
				}
				if k == 0 && absent(err) {
					return nil // replaced since the listing: its files are left out
				}
				return &fs.PathError{Op: "open", Path: r.abs(j.dir), Err: err}
			}
			fds[k] = fd
		}
		defer func() {
			for _, fd := range fds {
				unix.Close(fd)
			}
		}()
	}
	for _, i := range j.files {
		name := c.paths[i][len(j.dir):]
		if j.dir != "" {
			name = name[1:]
		}
		ok, err := c.copyFile(fds, c.paths[i], name, &c.entries[i], buf)
		if err != nil {
			return err
		}
		c.kept[i] = ok
		c.report.add(1)
	}
	return nil
}

// copyFile copies the parent's entry name (the path rel) from the directory fds[0] into
// fds[1] (the base) and fds[2] (the child's copy) and fills e. ok is false when the entry
// is gone, a directory or a special file (left out).
func (c *copier) copyFile(fds [3]int, rel, name string, e *mentry, buf []byte) (ok bool, err error) {
	e.Path = rel
	fd, err := openatRetry(fds[0], name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOENT || err == unix.ENOTDIR {
			return false, nil
		}
		return c.copyOther(fds, rel, name, e, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, &fs.PathError{Op: "fstat", Path: c.src.abs(rel), Err: err}
	}
	if kindOf(st.Mode) != KindFile {
		return false, nil // a FIFO or a device: left out
	}
	e.Kind, e.Parent, e.Mode, e.Size = KindFile, fingerprintOf(&st), permOf(st.Mode), st.Size
	e.HasDigest = st.Size <= c.digestMax && cachedDigest(fd, st.Size, buf, &e.Digest)
	var cst unix.Stat_t
	clonedWork, err := cloneAt(fds[2], name, fd, st.Mode&0o7777, &st, &cst, &c.noClone)
	if err != nil {
		return false, fmt.Errorf("copy to %s: %w", c.work.abs(rel), err)
	}
	e.Child = fingerprintOf(&cst)
	c.count(clonedWork)
	if e.HasDigest {
		// A write to the parent's file between the read and the clone shows in its
		// stat; then the base is a clone, as the child's copy is.
		var again unix.Stat_t
		if err := unix.Fstat(fd, &again); err == nil && fingerprintOf(&again) == e.Parent {
			c.digested.Add(1)
			return true, nil
		}
		e.HasDigest, e.Digest = false, [sha256.Size]byte{}
	}
	clonedBase, err := cloneAt(fds[1], name, fd, 0o600, nil, nil, &c.noClone)
	if err != nil {
		return false, fmt.Errorf("copy to %s: %w", c.base.abs(rel), err)
	}
	c.count(clonedBase)
	return true, nil
}

// count counts one file copy: a clone or a byte copy.
func (c *copier) count(cloned bool) {
	if cloned {
		c.cloned.Add(1)
	} else {
		c.copied.Add(1)
	}
}

// cachedDigest sets out to the SHA-256 of the size bytes of the open file fd if all of
// them are in the page cache, and reports whether it did. cachestat(2) says whether they
// are without reading them (so a file that is not cached costs no read); the read itself
// (into buf, which holds at least size bytes) does not wait either (RWF_NOWAIT). A file
// that is not cached or shrank, or a kernel without RWF_NOWAIT, gets no digest (its base
// is then a copy); on a kernel without cachestat(2) the read that does not wait decides.
// A file that grew reads as its first size bytes: the caller's second stat tells.
func cachedDigest(fd int, size int64, buf []byte, out *[sha256.Size]byte) bool {
	if size > 0 {
		var cs unix.Cachestat_t
		err := unix.Cachestat(uint(fd), &unix.CachestatRange{Len: uint64(size)}, &cs, 0)
		if err == nil && cs.Cache*uint64(pageSize) < uint64(size) {
			return false
		}
	}
	b := buf[:size]
	n := 0
	for n < len(b) {
		m, err := unix.Preadv2(fd, [][]byte{b[n:]}, int64(n), unix.RWF_NOWAIT)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false
		}
		if m == 0 {
			break
		}
		n += m
	}
	if int64(n) != size {
		return false
	}
	*out = sha256.Sum256(b[:n])
	return true
}

// copyOther handles an entry the parent's directory fds[0] would not open as a file
// (openErr): a symlink is copied as a symlink; a special file or a directory is left out;
// a regular file that cannot be opened is an error.
func (c *copier) copyOther(fds [3]int, rel, name string, e *mentry, openErr error) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(fds[0], name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if absent(err) {
			return false, nil
		}
		return false, &fs.PathError{Op: "lstat", Path: c.src.abs(rel), Err: err}
	}
	switch kindOf(st.Mode) {
	case KindSymlink:
	case KindFile:
		return false, &fs.PathError{Op: "open", Path: c.src.abs(rel), Err: openErr}
	default:
		return false, nil
	}
	target, err := readlinkAt(fds[0], name)
	if err != nil {
		if absent(err) {
			return false, nil
		}
		return false, &fs.PathError{Op: "readlink", Path: c.src.abs(rel), Err: err}
	}
	e.Kind, e.Parent, e.Target, e.Size = KindSymlink, fingerprintOf(&st), target, int64(len(target))
	for k, t := range []*root{c.base, c.work} {
		if err := unix.Symlinkat(target, fds[1+k], name); err != nil {
			return false, &fs.PathError{Op: "symlink", Path: t.abs(rel), Err: err}
		}
	}
	var cst unix.Stat_t
	if err := unix.Fstatat(fds[2], name, &cst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return false, &fs.PathError{Op: "lstat", Path: c.work.abs(rel), Err: err}
	}
	e.Child = fingerprintOf(&cst)
	return true, nil
}

// setDirModes gives the child's copy's directories the parent's modes, deepest first (a
// read-only directory is written into before it gets its mode). The base stays private.
func (c *copier) setDirModes() error {
	for _, d := range slices.Backward(c.dirs) {
		if mode, ok := c.dirMode[d]; ok {
			if err := unix.Fchmodat(c.work.fd, d, mode, 0); err != nil {
				return &fs.PathError{Op: "chmod", Path: c.work.abs(d), Err: err}
			}
		}
	}
	return nil
}

// cloneAt creates name in the directory dfd with the mode bits perm and fills it with the
// bytes of the open file src (a clone where the file system can). With st, the new file
// also gets st's access and modification times, and its own status goes to out (its mode
// is set again if the umask or the clone changed it). It returns whether the bytes are
// shared.
func cloneAt(dfd int, name string, src int, perm uint32, st, out *unix.Stat_t, noClone *atomic.Bool) (bool, error) {
	d, err := openatRetry(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return false, err
	}
	cloned, err := copyFd(d, src, noClone)
	if err == nil && st != nil {
		err = futimens(d, st.Atim, st.Mtim)
		if err == nil {
			err = unix.Fstat(d, out)
		}
		if err == nil && out.Mode&0o7777 != perm {
			if err = unix.Fchmod(d, perm); err == nil {
				err = unix.Fstat(d, out)
			}
		}
	}
	if cerr := unix.Close(d); err == nil {
		err = cerr
	}
	return cloned, err
}

// openatRetry is openat, again after EINTR.
func openatRetry(dfd int, name string, flags int, mode uint32) (int, error) {
	for {
		fd, err := unix.Openat(dfd, name, flags, mode)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// readlinkAt returns the target of the symlink name in the directory dfd.
func readlinkAt(dfd int, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(dfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		buf = make([]byte, 2*len(buf))
	}
}
