package pathmap

import (
	"cmp"

	"golang.org/x/sys/unix"
)

// resolveStrict is how every open below a mount root resolves: never above the starting
// descriptor, never through a symlink (the walk resolved them already; one found now was
// swapped in after the check) and never through a /proc magic link.
const resolveStrict = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openat2 opens rel beneath dirfd with resolve flags, retrying EINTR and the EAGAIN the
// kernel returns when a rename raced the lookup.
func openat2(dirfd int, rel string, flags int, mode uint32, resolve uint64) (int, error) {
	rel = cmp.Or(rel, ".")
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: resolve}
	var err error
	for range 64 {
		var fd int
		fd, err = unix.Openat2(dirfd, rel, &how)
		if err == nil {
			return fd, nil
		}
		if err != unix.EINTR && err != unix.EAGAIN {
			return -1, err
		}
	}
	return -1, err
}

// fstat returns the stat of an open descriptor.
func fstat(fd int) (unix.Stat_t, error) {
	var st unix.Stat_t
	for {
		err := unix.Fstat(fd, &st)
		if err != unix.EINTR {
			return st, err
		}
	}
}

// readlinkFd reads the target of the symlink an O_PATH|O_NOFOLLOW descriptor refers to.
func readlinkFd(fd int) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(fd, "", buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		if len(buf) >= MaxPath {
			return "", unix.ENAMETOOLONG
		}
		buf = make([]byte, 2*len(buf))
	}
}

// closeFd closes a descriptor, ignoring errors (used on read-only and O_PATH descriptors).
func closeFd(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}

// fileType is the type bits of a stat mode.
func fileType(st *unix.Stat_t) uint32 { return st.Mode & unix.S_IFMT }
