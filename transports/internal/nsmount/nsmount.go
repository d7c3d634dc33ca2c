// Package nsmount mounts host directories into a running container's mount namespace,
// as its runtime would have at the container's creation: the hand-out of a kernel a warm
// pool started before its session (transports/docker, transports/containerd,
// transports/kubernetes).
package nsmount

import (
	"errors"
	"fmt"
	"os"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/kennel-dev/kennel/pathmap"
)

// Bind is a bind mount a pooled kernel's container gets at its hand-out: the host
// directory Host at Target in the container, read-only when ReadOnly.
type Bind struct {
	Host, Target string
	ReadOnly     bool
}

// Binds are the bind mounts of a session's path-map mounts, each path cleaned.
func Binds(mounts []pathmap.Mount) []Bind {
	binds := make([]Bind, 0, len(mounts)+1)
	for _, m := range mounts {
		binds = append(binds, Bind{Host: path.Clean(m.Host), Target: path.Clean(m.Sandbox), ReadOnly: m.ReadOnly})
	}
	return binds
}

// Hold opens the mount namespace of process pid (/proc/PID/ns/mnt); alive, checked after
// the open, must report that pid is still the process it was meant to be (its
// container's), so the namespace held is that process's and no later one's.
func Hold(pid int, alive func() bool) (*os.File, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("mount namespace of pid %d: no such process", pid)
	}
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/mnt")
	if err != nil {
		return nil, fmt.Errorf("mount namespace of pid %d: %w", pid, err)
	}
	if !alive() {
		_ = f.Close()
		return nil, fmt.Errorf("mount namespace of pid %d: the process is no longer the container's", pid)
	}
	return f, nil
}

// Into mounts binds, parents first, in the mount namespace ns (an open
// /proc/PID/ns/mnt of a container's process) as the engine would have at the
// container's creation: each a recursive clone of its host directory (open_tree(2)),
// made private, nosuid and nodev (and read-only, recursively, when ReadOnly) before it is
// attached (move_mount(2)), so no process in the container ever sees it writable.
//
// A target's missing directories are made (root's, 0755); on a read-only root file system
// the root is made writable for that and read-only again before Into returns. A
// target path through a symlink in the container, or through a file that is no
// directory, is refused: the container's file system is the image's, and no kernel has
// run in it yet, but a path is resolved there only as directories.
//
// It needs CAP_SYS_ADMIN (a root controller). The namespace is entered on the process's
// mover thread (see mover), which no other goroutine runs on; calls are one at a time.
func Into(ns *os.File, binds []Bind) (err error) {
	binds = slices.Clone(binds)
	slices.SortStableFunc(binds, func(a, b Bind) int {
		return strings.Count(path.Clean(a.Target), "/") - strings.Count(path.Clean(b.Target), "/")
	})
	trees := make([]int, 0, len(binds))
	defer func() {
		for _, fd := range trees {
			_ = unix.Close(fd)
		}
	}()
	for _, b := range binds {
		if !path.IsAbs(b.Target) || !path.IsAbs(b.Host) {
			return fmt.Errorf("bind %q at %q: paths must be absolute", b.Host, b.Target)
		}
		if path.Clean(b.Target) == "/" {
			return fmt.Errorf("bind %q at %q: not over the container's root", b.Host, b.Target)
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, b.Host, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return fmt.Errorf("clone the mount of %q: %w", b.Host, err)
		}
		trees = append(trees, fd)
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Propagation: unix.MS_PRIVATE}
		if b.ReadOnly {
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
			return fmt.Errorf("set the attributes of the mount of %q: %w", b.Host, err)
		}
	}
	return inNamespace(ns, func() error { return attachIn(binds, trees) })
}

// mover is the one OS thread of this process that enters other mount namespaces: a
// goroutine locked to it for the life of the process, its file-system attributes its own
// (unshare(CLONE_FS), which entering a mount namespace needs), back in the process's own
// namespace after each call. It must never end: a thread that ends fires the
// parent-death signal (PR_SET_PDEATHSIG) of every child it started, such as the local
// transport's reapers, and one that entered another namespace could otherwise only end.
// So it is process-wide, started at first use.
var mover struct {
	once   sync.Once
	err    error // why it could not start
	calls  chan moverCall
	broken chan struct{} // closed once the thread could not come back
}

type moverCall struct {
	ns   *os.File
	f    func() error
	done chan error
}

// inNamespace runs f on the mover thread inside the mount namespace ns.
func inNamespace(ns *os.File, f func() error) error {
	mover.once.Do(func() {
		mover.calls, mover.broken = make(chan moverCall), make(chan struct{})
		started := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			self, err := os.Open("/proc/thread-self/ns/mnt")
			if err == nil {
				if err = unix.Unshare(unix.CLONE_FS); err != nil {
					_ = self.Close()
				}
			}
			if err != nil {
				runtime.UnlockOSThread() // nothing of it changed
				started <- fmt.Errorf("mount namespace worker: %w", err)
				return
			}
			started <- nil
			for c := range mover.calls {
				c.done <- c.run(self)
			}
		}()
		mover.err = <-started
	})
	if mover.err != nil {
		return mover.err
	}
	c := moverCall{ns: ns, f: f, done: make(chan error, 1)}
	select {
	case mover.calls <- c:
		return <-c.done
	case <-mover.broken:
		return fmt.Errorf("mount namespace worker: it could not leave a container's namespace")
	}
}

// run enters c.ns, runs c.f and goes back to self (the process's namespace). A thread
// that cannot go back is left to hang here, never to run anything again.
func (c moverCall) run(self *os.File) error {
	if err := unix.Setns(int(c.ns.Fd()), unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("enter the container's mount namespace: %w", err)
	}
	err := c.f()
	if berr := unix.Setns(int(self.Fd()), unix.CLONE_NEWNS); berr != nil {
		c.done <- fmt.Errorf("leave the container's mount namespace: %w", berr)
		close(mover.broken)
		select {} // in another namespace for good: this thread does nothing more
	}
	return err
}

// attachIn, on the mover thread in the container's namespace, attaches each detached
// tree at its bind's target.
func attachIn(binds []Bind, trees []int) (err error) {
	var rootMadeWritable bool
	defer func() {
		if rootMadeWritable {
			if rerr := unix.MountSetattr(unix.AT_FDCWD, "/", 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); rerr != nil && err == nil {
				err = fmt.Errorf("make the container's root read-only again: %w", rerr)
			}
		}
	}()
	for i, b := range binds {
		if err := mkdirAllIn(b.Target, &rootMadeWritable); err != nil {
			return err
		}
		if err := unix.MoveMount(trees[i], "", unix.AT_FDCWD, b.Target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("mount %q at %q in the container: %w", b.Host, b.Target, err)
		}
	}
	return nil
}

// mkdirAllIn makes dir's missing directories, one component at a time without following
// a symlink; on a read-only root it makes the root writable first (and says so through
// rootWritable, for the caller to undo).
func mkdirAllIn(dir string, rootWritable *bool) error {
	at := "/"
	for _, name := range strings.Split(strings.Trim(path.Clean(dir), "/"), "/") {
		if name == "" {
			continue
		}
		at = path.Join(at, name)
		var st unix.Stat_t
		err := unix.Lstat(at, &st)
		switch {
		case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
			continue
		case err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK:
			return fmt.Errorf("mount target %q: %q is a symlink in the container", dir, at)
		case err == nil:
			return fmt.Errorf("mount target %q: %q is no directory in the container", dir, at)
		case !errors.Is(err, unix.ENOENT):
			return fmt.Errorf("mount target %q: %w", dir, err)
		}
		err = unix.Mkdir(at, 0o755)
		if errors.Is(err, unix.EROFS) && !*rootWritable {
			if rerr := unix.MountSetattr(unix.AT_FDCWD, "/", 0, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY}); rerr != nil {
				return fmt.Errorf("mount target %q: make the container's root writable to make it: %w", dir, rerr)
			}
			*rootWritable = true
			err = unix.Mkdir(at, 0o755)
		}
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("mount target %q: %w", dir, err)
		}
	}
	return nil
}
