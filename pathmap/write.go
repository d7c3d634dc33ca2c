package pathmap

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// WriteFile replaces the target's content with data, atomically: the data goes to a new
// file beside the target (created O_EXCL beneath the mount's root), is synced, and is
// renamed over the target, so a reader sees the old content or the new, never a mix.
// Missing parent directories are created first, one mkdirat at a time beneath the
// mount's root (mode 0777 less the umask). created reports that the file did not exist.
//
// Ownership: a new file (0644 less the umask) and the directories made for it belong to
// the Map's Owner (Config.Owner), given with fchown on their descriptors before the file
// is renamed into place; with no Owner, to the controller. A replaced file keeps its
// permission bits (set-id bits dropped) and its owner: the rename puts a new inode in
// its place, and keeping the old owner makes the write look like an in-place one (the
// operator's file stays the operator's, whoever the kernel runs as). Where the host does
// not allow keeping it (no CAP_CHOWN), the file becomes the Owner's, or with no Owner the
// controller's, as before.
//
// A read-only mount refuses with ErrReadOnly, a directory target with ErrInvalid; nothing
// is changed then. A failure after anything was made (a full disk: ErrNoSpace; an owner
// that cannot be given: ErrDenied) removes the new file and the directories made for it,
// and the target keeps its old content.
func (t Target) WriteFile(data []byte) (created bool, err error) {
	const op = "write"
	switch {
	case t.mnt.ReadOnly:
		return false, newErr(op, t.Sandbox(), ErrReadOnly, nil)
	case t.tail == nil && t.typ == unix.S_IFDIR:
		return false, newErr(op, t.Sandbox(), ErrInvalid, detail("is a directory"))
	case t.tail == nil && t.typ != unix.S_IFREG:
		return false, newErr(op, t.Sandbox(), ErrInvalid, detail("not a regular file"))
	}
	dfd, name, undo, err := t.parentDir(op, true)
	if err != nil {
		return false, err
	}
	defer closeFd(dfd)
	ok := false
	defer func() {
		if !ok {
			undo()
		}
	}()
	perm, uid, gid := uint32(0o644), -1, -1
	var st unix.Stat_t
	switch err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == unix.ENOENT:
		created = true
	case err != nil:
		return false, fromErrno(op, t.Sandbox(), err)
	case fileType(&st) == unix.S_IFREG:
		perm, uid, gid = st.Mode&0o777, int(st.Uid), int(st.Gid)
	case fileType(&st) == unix.S_IFDIR:
		return false, newErr(op, t.Sandbox(), ErrInvalid, detail("is a directory"))
	case fileType(&st) == unix.S_IFLNK:
		return false, newErr(op, t.Sandbox(), ErrChanged, nil)
	default:
		return false, newErr(op, t.Sandbox(), ErrInvalid, detail("not a regular file"))
	}
	own := fileOwner{keepUID: uid, keepGID: gid, set: t.owner()}
	err = replaceWith(dfd, name, perm, own, !created, false, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
	if err != nil {
		return false, fromErrno(op, t.Sandbox(), err)
	}
	ok = true
	return created, nil
}

// owner is the Map's Owner, nil for the controller's own.
func (t Target) owner() *Owner {
	if t.m == nil {
		return nil
	}
	return t.m.owner
}

// replaceWith creates a temporary file in dfd, fills it with fill, gives it to own,
// syncs it and renames it to name (failing if name exists when noReplace). With keep
// the file gets exactly perm. The temporary file is removed on any failure.
func replaceWith(dfd int, name string, perm uint32, own fileOwner, keep, noReplace bool, fill func(*os.File) error) error {
	var tmp string
	var fd int
	var err error
	for range 16 {
		tmp = fmt.Sprintf(".kennel-tmp-%016x", rand.Uint64())
		fd, err = openat2(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, perm, resolveStrict)
		if err != unix.EEXIST {
			break
		}
	}
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), tmp)
	ok := false
	defer func() {
		if !ok {
			f.Close()
			unix.Unlinkat(dfd, tmp, 0)
		}
	}()
	if err := fill(f); err != nil {
		return errnoOf(err)
	}
	if err := own.give(f); err != nil {
		return err
	}
	if keep {
		if err := f.Chmod(os.FileMode(perm)); err != nil {
			return errnoOf(err)
		}
	}
	if err := f.Sync(); err != nil {
		return errnoOf(err)
	}
	if err := f.Close(); err != nil {
		return errnoOf(err)
	}
	if noReplace {
		err = renameNoReplace(dfd, tmp, dfd, name)
	} else {
		err = unix.Renameat(dfd, tmp, dfd, name)
	}
	if err != nil {
		return err
	}
	ok = true
	_ = unix.Fsync(dfd) // best effort: an O_PATH descriptor cannot be synced
	return nil
}

// parentDir opens the directory that holds the target's last component and returns it
// with that component. With create, the missing directories of the tail are made first,
// each with mkdirat and opened with openat2 beneath its parent, never through a symlink;
// undo removes the directories it made (if still empty), for a caller whose change then
// failed. undo is never nil.
func (t Target) parentDir(op string, create bool) (fd int, name string, undo func(), err error) {
	undo = func() {}
	var parent string
	var mk []string
	if t.tail == nil {
		if t.rel == "" {
			return -1, "", undo, newErr(op, t.Sandbox(), ErrInvalid, detail("is a mount's root"))
		}
		parent, name = parentOf(t.rel)
	} else {
		parent, name = t.rel, t.tail[len(t.tail)-1]
		mk = t.tail[:len(t.tail)-1]
		if len(mk) > 0 && !create {
			return -1, "", undo, newErr(op, t.Sandbox(), ErrNotFound, nil)
		}
	}
	fd, err = openDir(t.mnt.root, parent)
	if err != nil {
		return -1, "", undo, t.reopenErr(op, err)
	}
	var made []string // relative paths (below the root) of the directories made
	undo = func() {
		for i := len(made) - 1; i >= 0; i-- {
			dir, base := parentOf(made[i])
			if dfd, err := openDir(t.mnt.root, dir); err == nil {
				unix.Unlinkat(dfd, base, unix.AT_REMOVEDIR)
				closeFd(dfd)
			}
		}
	}
	fail := func(err error) (int, string, func(), error) {
		undo()
		return -1, "", func() {}, err
	}
	rel := parent
	owner := t.owner()
	for _, c := range mk {
		rel = relJoin(rel, c)
		fresh := false
		switch err := unix.Mkdirat(fd, c, 0o777); {
		case err == nil:
			made, fresh = append(made, rel), true
		case err != unix.EEXIST:
			closeFd(fd)
			return fail(fromErrno(op, t.Sandbox(), err))
		}
		next, err := openDir(fd, c)
		closeFd(fd)
		if err != nil {
			return fail(t.reopenErr(op, err))
		}
		if fresh && owner != nil {
			if err := giveDir(next, *owner); err != nil {
				closeFd(next)
				if err == ErrChanged {
					return fail(newErr(op, t.Sandbox(), ErrChanged, detail("a directory it made was replaced")))
				}
				return fail(fromErrno(op, t.Sandbox(), err))
			}
		}
		fd = next
	}
	return fd, name, undo, nil
}

// openDir opens a directory beneath dirfd for syncing (O_RDONLY), or as O_PATH when it
// cannot be read.
func openDir(dirfd int, rel string) (int, error) {
	fd, err := openat2(dirfd, rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, resolveStrict)
	if err == unix.EACCES {
		fd, err = openat2(dirfd, rel, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0, resolveStrict)
	}
	return fd, err
}

// renameNoReplace renames without replacing an existing destination (EEXIST). Where the
// file system lacks RENAME_NOREPLACE it checks, then renames: a race there can only
// replace an entry in the same directory, never reach outside it.
func renameNoReplace(odir int, oname string, ndir int, nname string) error {
	err := unix.Renameat2(odir, oname, ndir, nname, unix.RENAME_NOREPLACE)
	if err != unix.EINVAL {
		return err
	}
	var st unix.Stat_t
	switch err := unix.Fstatat(ndir, nname, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil:
		return unix.EEXIST
	case err != unix.ENOENT:
		return err
	}
	return unix.Renameat(odir, oname, ndir, nname)
}

// Rename moves the entry from to the new name to (both from ResolveEntry): a symlink is
// moved as itself. Both must be in writable mounts (ErrReadOnly), from must exist and not
// be a mount's root (ErrNotFound, ErrInvalid), and to must not exist (ErrExists); to's
// missing parent directories are created (and given to the Map's Owner, as WriteFile's
// are). The entry moves as it is, owner and mode unchanged. Across file systems (EXDEV) a
// regular file is copied beside the destination (its mode kept, and its owner where the
// host allows, else the Map's Owner's), synced, renamed into place and then removed from
// its old place; anything else is refused with ErrCrossDevice. Nothing changes on a
// refusal.
func Rename(from, to Target) error {
	const op = "rename"
	switch {
	case from.mnt == nil || to.mnt == nil:
		return newErr(op, "", ErrInvalid, detail("zero Target"))
	case from.mnt.ReadOnly:
		return newErr(op, from.Sandbox(), ErrReadOnly, nil)
	case to.mnt.ReadOnly:
		return newErr(op, to.Sandbox(), ErrReadOnly, nil)
	case from.tail != nil:
		return newErr(op, from.Sandbox(), ErrNotFound, nil)
	case from.rel == "":
		return newErr(op, from.Sandbox(), ErrInvalid, detail("is a mount's root"))
	case to.tail == nil:
		return newErr(op, to.Sandbox(), ErrExists, nil)
	}
	if from.typ == unix.S_IFDIR && from.mnt == to.mnt && strings.HasPrefix(to.Host(), from.Host()+"/") {
		return newErr(op, to.Sandbox(), ErrInvalid, detail("cannot move a directory into itself"))
	}
	fdir, fname, _, err := from.parentDir(op, false)
	if err != nil {
		return err
	}
	defer closeFd(fdir)
	var st unix.Stat_t
	if err := unix.Fstatat(fdir, fname, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return from.reopenErr(op, err)
	}
	if st.Dev != from.dev || st.Ino != from.ino {
		return newErr(op, from.Sandbox(), ErrChanged, nil)
	}
	tdir, tname, undo, err := to.parentDir(op, true)
	if err != nil {
		return err
	}
	defer closeFd(tdir)
	err = renameNoReplace(fdir, fname, tdir, tname)
	if err != nil && !(err == unix.EXDEV && fileType(&st) == unix.S_IFREG) {
		undo()
	}
	switch {
	case err == nil:
		_ = unix.Fsync(fdir)
		_ = unix.Fsync(tdir)
		return nil
	case err == unix.EEXIST || err == unix.ENOTEMPTY:
		return newErr(op, to.Sandbox(), ErrExists, nil)
	case err == unix.EXDEV && fileType(&st) == unix.S_IFREG:
		if err := copyAcross(fdir, fname, &st, tdir, tname, to.owner()); err != nil {
			undo()
			return fromErrno(op, to.Sandbox(), err)
		}
		if err := unix.Unlinkat(fdir, fname, 0); err != nil {
			return fromErrno(op, from.Sandbox(), fmt.Errorf("copied, but the source stays: %w", err))
		}
		_ = unix.Fsync(fdir)
		return nil
	case err == unix.EXDEV:
		return newErr(op, from.Sandbox(), ErrCrossDevice, err)
	}
	return fromErrno(op, from.Sandbox(), err)
}

// copyAcross copies the regular file fname of fdir (with stat st) to tname in tdir,
// through a synced temporary file renamed into place without replacing anything. The
// copy keeps the file's mode and, where the host allows, its owner (else it goes to
// owner, the Map's Owner, or stays the controller's).
func copyAcross(fdir int, fname string, st *unix.Stat_t, tdir int, tname string, owner *Owner) error {
	sfd, err := openat2(fdir, fname, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_NOCTTY, 0, resolveStrict)
	if err != nil {
		return err
	}
	src := os.NewFile(uintptr(sfd), fname)
	defer src.Close()
	got, err := fstat(sfd)
	if err != nil {
		return err
	}
	if got.Dev != st.Dev || got.Ino != st.Ino || fileType(&got) != unix.S_IFREG {
		return unix.ENOENT
	}
	own := fileOwner{keepUID: int(st.Uid), keepGID: int(st.Gid), set: owner}
	return replaceWith(tdir, tname, st.Mode&0o777, own, true, true, func(f *os.File) error {
		_, err := io.Copy(f, src)
		return err
	})
}
