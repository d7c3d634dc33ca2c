package workspaces

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// trashName is the directory of a workspace that a finished hand-back moves the base
// and the child's copy into (one rename each) before they are removed.
const trashName = "trash"

// removeWorkers is how many goroutines remove one tree.
const removeWorkers = 4

// Sweeper removes, in the background, what finished hand-backs moved into their
// workspaces' trash/ directories (the base and the child's copy), and what earlier
// processes left there (a process that ended before its removal did). Wait waits for
// the removals it started.
//
// The zero value is ready to use. A Sweeper may be shared by many calls and goroutines;
// it must not be copied after first use. A nil *Sweeper in an option means: remove before
// the call returns.
type Sweeper struct {
	// Defer, set before first use, makes the Sweeper remove nothing itself: each trash
	// directory it is given is noted instead, for Deferred to return, so that a process
	// which outlives the caller removes them with RemoveTrash (a command then exits as
	// soon as its work is recorded). Until that removal runs, the trash stays where a
	// crash would leave it, and the next Create or HandBack under the same state
	// directory removes it too. Wait then returns nil at once.
	Defer bool

	mu       sync.Mutex
	deferred []string
	running  int
	idle     chan struct{} // closed when running drops to 0; nil while nobody waits
	errs     []error
	// hook, when not nil, is called by each removal before it starts (a test hook: it
	// may block to hold a removal back).
	hook func(trash string)
}

// Wait waits until none of the removals started through s runs, and returns their
// errors joined (each error is returned by one Wait only); nil when all succeeded. When
// ctx ends first it returns ctx's error and the removals go on.
func (s *Sweeper) Wait(ctx context.Context) error {
	s.mu.Lock()
	if s.running > 0 {
		if s.idle == nil {
			s.idle = make(chan struct{})
		}
		idle := s.idle
		s.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return fmt.Errorf("wait for the workspace sweep: %w", ctx.Err())
		}
		s.mu.Lock()
	}
	err := errors.Join(s.errs...)
	s.errs = nil
	s.mu.Unlock()
	return err
}

// removeTrash removes the trash directory trash of a workspace; see removeTrashNow. With a
// nil s it does so before it returns; else in a goroutine that s.Wait waits for (and a
// ctx that ends then does not stop it).
func (s *Sweeper) removeTrash(ctx context.Context, trash string, wait bool) error {
	if s == nil {
		return removeTrashNow(ctx, trash, wait)
	}
	s.mu.Lock()
	if s.Defer {
		if !slices.Contains(s.deferred, trash) {
			s.deferred = append(s.deferred, trash)
		}
		s.mu.Unlock()
		return nil
	}
	s.running++
	hook := s.hook
	s.mu.Unlock()
	go func() {
		if hook != nil {
			hook(trash)
		}
		err := removeTrashNow(context.WithoutCancel(ctx), trash, wait)
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			s.errs = append(s.errs, err)
		}
		if s.running--; s.running == 0 && s.idle != nil {
			close(s.idle)
			s.idle = nil
		}
	}()
	return nil
}

// Deferred returns the trash directories a Sweeper with Defer was given, in order, each
// once, and forgets them: absolute paths, each the trash/ directory of a workspace, for
// RemoveTrash.
func (s *Sweeper) Deferred() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.deferred
	s.deferred = nil
	return d
}

// RemoveTrash removes the trash directory trash of a workspace (as Sweeper.Deferred
// returns it: <workspace dir>/trash) and everything below it, never following a symlink.
// When another process is removing the same directory it waits for that one's end and
// removes what is left. A missing trash is no error. Any path that is not the trash/
// directory of a workspace directory (one Open accepts) is refused with ErrNotWorkspace
// and nothing is removed. ctx ends the removal between entries; what is left stays for
// the next sweep.
func RemoveTrash(ctx context.Context, trash string) error {
	clean := filepath.Clean(trash)
	wsDir := filepath.Dir(clean)
	if !filepath.IsAbs(clean) || filepath.Base(clean) != trashName {
		return fmt.Errorf("remove trash %s: not a workspace's trash: %w", trash, ErrNotWorkspace)
	}
	if ws, err := Open(wsDir); err != nil {
		return fmt.Errorf("remove trash %s: %w", trash, err)
	} else if ws.Dir != wsDir {
		return fmt.Errorf("remove trash %s: not a workspace's trash: %w", trash, ErrNotWorkspace)
	}
	return removeTrashNow(ctx, clean, true)
}

// removeTrashNow removes the directory trash and all below it, holding an flock on it
// meanwhile, so two removers of one trash directory do not both do the work: with wait it
// waits for another remover's lock (a hand-back removing the trash it just filled), else
// it leaves a locked trash to its remover. A missing trash is no error.
func removeTrashNow(ctx context.Context, trash string, wait bool) error {
	fd, err := openatRetry(unix.AT_FDCWD, trash, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove %s: %w", trash, err)
	}
	defer unix.Close(fd)
	how := unix.LOCK_EX
	if !wait {
		how |= unix.LOCK_NB
	}
	for {
		err = unix.Flock(fd, how)
		if err != unix.EINTR {
			break
		}
	}
	if err == unix.EWOULDBLOCK {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove %s: lock: %w", trash, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("remove %s: %w", trash, err)
	}
	if st.Nlink == 0 {
		return nil // removed by the remover whose lock this waited for
	}
	if err := removeBelow(ctx, fd, trash); err != nil {
		return err
	}
	// Not empty: a hand-back moved more in meanwhile, and removes that itself.
	if err := unix.Rmdir(trash); err != nil && err != unix.ENOENT && err != unix.ENOTEMPTY && err != unix.EEXIST {
		return fmt.Errorf("remove %s: %w", trash, err)
	}
	return nil
}

// toTrash moves the entry name of the workspace ws into its trash/ directory with one
// rename (to trash/<name>, or trash/<name>.<n> when that is taken). A missing entry is no
// error.
func toTrash(ws *Workspace, name string) error {
	src := filepath.Join(ws.Dir, name)
	if _, err := os.Lstat(src); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	trash := filepath.Join(ws.Dir, trashName)
	for i := 0; i < 1000; i++ {
		if err := os.Mkdir(trash, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("move %s to the trash: %w", name, err)
		}
		dst := filepath.Join(trash, name)
		if i > 0 {
			dst += "." + strconv.Itoa(i)
		}
		err := unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE)
		if err == unix.EINVAL {
			// RENAME_NOREPLACE unsupported here: look, then rename (only kennel writes
			// into trash/, under the workspace's lock).
			if _, lerr := os.Lstat(dst); lerr == nil {
				err = unix.EEXIST
			} else {
				err = unix.Rename(src, dst)
			}
		}
		switch err {
		case nil:
			return nil
		case unix.EEXIST, unix.ENOTEMPTY:
			continue // a name an earlier run left: the next one
		case unix.ENOENT:
			if _, lerr := os.Lstat(src); errors.Is(lerr, fs.ErrNotExist) {
				return nil
			}
			continue // trash/ was removed by a sweep meanwhile: make it again
		}
		return fmt.Errorf("move %s to the trash: %w", name, err)
	}
	return fmt.Errorf("move %s to the trash: %w", name, unix.EEXIST)
}

// sweepLeftovers removes the trash that earlier hand-backs left in the workspaces beside
// the workspace directory wsDir (<state>/workspaces/<parent key>/<id>): every
// <state>/workspaces/*/*/trash that no other process is removing. A directory that does
// not sit in a "workspaces" directory is not looked around. With a nil s the removal is
// done before it returns; else in the background.
func sweepLeftovers(ctx context.Context, wsDir string, s *Sweeper) error {
	all := filepath.Dir(filepath.Dir(wsDir))
	if filepath.Base(all) != "workspaces" {
		return s.removeTrash(ctx, filepath.Join(wsDir, trashName), false)
	}
	groups, err := os.ReadDir(all)
	if err != nil {
		return fmt.Errorf("sweep %s: %w", all, err)
	}
	var errs []error
	for _, g := range groups {
		ids, err := os.ReadDir(filepath.Join(all, g.Name()))
		if err != nil {
			continue // not a directory, or gone
		}
		for _, id := range ids {
			trash := filepath.Join(all, g.Name(), id.Name(), trashName)
			if st, err := os.Lstat(trash); err != nil || !st.IsDir() {
				continue
			}
			if err := s.removeTrash(ctx, trash, false); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removeTree removes p and all below it (see removeAllAt), with several goroutines.
func removeTree(p string) error {
	fd, err := openatRetry(unix.AT_FDCWD, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return removeAllAt(unix.AT_FDCWD, p, p)
	}
	defer unix.Close(fd)
	if err := removeBelow(context.Background(), fd, p); err != nil {
		return err
	}
	if err := unix.Rmdir(p); err != nil && err != unix.ENOENT {
		return &fs.PathError{Op: "remove", Path: p, Err: err}
	}
	return nil
}

// removeBelow removes everything in the open directory dfd (at path p, for errors),
// spreading the work over removeWorkers goroutines: over its entries, or over its
// subdirectories' entries when it holds few.
func removeBelow(ctx context.Context, dfd int, p string) error {
	type item struct {
		dfd     int
		name, p string
	}
	names, err := fdNames(dfd)
	if err != nil {
		return &fs.PathError{Op: "remove", Path: p, Err: err}
	}
	var items []item
	type sub struct {
		fd      int
		name, p string
	}
	var subs []sub // opened subdirectories whose entries are items
	defer func() {
		for _, s := range subs {
			unix.Close(s.fd)
		}
	}()
	for _, n := range names {
		if len(names) >= 2*removeWorkers {
			items = append(items, item{dfd, n, filepath.Join(p, n)})
			continue
		}
		fd, err := openatRetry(dfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			items = append(items, item{dfd, n, filepath.Join(p, n)}) // not a directory, or not readable yet
			continue
		}
		subNames, err := fdNames(fd)
		if err != nil {
			unix.Close(fd)
			items = append(items, item{dfd, n, filepath.Join(p, n)})
			continue
		}
		s := sub{fd, n, filepath.Join(p, n)}
		subs = append(subs, s)
		for _, sn := range subNames {
			items = append(items, item{fd, sn, filepath.Join(s.p, sn)})
		}
	}
	jobs := make(chan item)
	errs := make([]error, removeWorkers)
	var wg sync.WaitGroup
	for w := range removeWorkers {
		wg.Go(func() {
			for it := range jobs {
				if errs[w] != nil {
					continue
				}
				if err := ctx.Err(); err != nil {
					errs[w] = err
					continue
				}
				errs[w] = removeAllAt(it.dfd, it.name, it.p)
			}
		})
	}
	for _, it := range items {
		jobs <- it
	}
	close(jobs)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, s := range subs {
		if err := unlinkDirAt(dfd, s.name); err != nil {
			return &fs.PathError{Op: "remove", Path: s.p, Err: err}
		}
	}
	return nil
}

// fdNames lists the names in the open directory fd (from its start). A directory removed
// meanwhile (by another remover) is empty.
func fdNames(fd int) ([]string, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "")
	defer f.Close()
	if _, err := unix.Seek(dup, 0, 0); err != nil {
		return nil, err
	}
	names, err := f.Readdirnames(-1)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	return names, err
}

// removeAllAt removes the entry name of the directory dfd (at path p, for errors) and,
// for a directory, everything below it. It never follows a symlink: a link is removed,
// not what it points at. A directory it may not read or write into is given mode 0700
// first, through its own descriptor. A missing entry is no error.
func removeAllAt(dfd int, name, p string) error {
	err := unlinkRetry(dfd, name, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err == unix.EACCES || err == unix.EPERM {
		// Not allowed to write into dfd (or an immutable file): make dfd writable once.
		if unix.Fchmod(dfd, 0o700) == nil {
			if err = unlinkRetry(dfd, name, 0); err == nil || err == unix.ENOENT {
				return nil
			}
		}
	}
	if err != unix.EISDIR {
		return &fs.PathError{Op: "remove", Path: p, Err: err}
	}
	fd, err := openatRetry(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.EACCES {
		if err = chmodDirAt(dfd, name); err == nil {
			fd, err = openatRetry(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		}
	}
	switch err {
	case nil:
	case unix.ENOENT:
		return nil
	case unix.ENOTDIR, unix.ELOOP:
		// Replaced by a file meanwhile.
		if err := unlinkRetry(dfd, name, 0); err != nil && err != unix.ENOENT {
			return &fs.PathError{Op: "remove", Path: p, Err: err}
		}
		return nil
	default:
		return &fs.PathError{Op: "remove", Path: p, Err: err}
	}
	defer unix.Close(fd)
	names, err := fdNames(fd)
	if err != nil {
		return &fs.PathError{Op: "remove", Path: p, Err: err}
	}
	for _, n := range names {
		if err := removeAllAt(fd, n, filepath.Join(p, n)); err != nil {
			return err
		}
	}
	if err := unlinkDirAt(dfd, name); err != nil {
		return &fs.PathError{Op: "remove", Path: p, Err: err}
	}
	return nil
}

// unlinkDirAt removes the empty directory name of dfd; a missing one is no error.
func unlinkDirAt(dfd int, name string) error {
	err := unlinkRetry(dfd, name, unix.AT_REMOVEDIR)
	if err == unix.ENOENT {
		return nil
	}
	return err
}

// unlinkRetry is unlinkat, again after EINTR.
func unlinkRetry(dfd int, name string, flags int) error {
	for {
		err := unix.Unlinkat(dfd, name, flags)
		if err != unix.EINTR {
			return err
		}
	}
}

// chmodDirAt gives the directory name of dfd mode 0700 without following a symlink: it
// opens it with O_PATH and changes the mode of that very inode (through /proc/self/fd).
func chmodDirAt(dfd int, name string) error {
	fd, err := openatRetry(dfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), 0o700)
}
