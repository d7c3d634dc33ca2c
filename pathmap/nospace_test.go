package pathmap

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testtree"
)

// mountTmpfs mounts a tmpfs of the given size ("1m") on a new temporary directory and
// unmounts it when the test ends (before the directory is removed).
func mountTmpfs(t testing.TB, size string) string {
	t.Helper()
	testneed.Root(t) // to mount a tmpfs
	dir := tempDir(t)
	err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+size+",mode=0755")
	if err != nil {
		testneed.Missing(t, "mount -t tmpfs", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes zeros to the file p until its file system is full.
func fill(t testing.TB, p string) {
	t.Helper()
	f, err := os.Create(p)
	must(t, err)
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", p, err)
			}
			return
		}
	}
}

// noTemps fails the test if a temporary file of WriteFile is left anywhere below dir.
func noTemps(t *testing.T, dir string) {
	t.Helper()
	if s := strings.Join(testtree.List(t, dir), "\n"); strings.Contains(s, ".kennel-tmp-") {
		t.Errorf("temporary file left:\n%s", s)
	}
}

func TestWriteFileOnAFullDiskIsNoSpaceAndChangesNothing(t *testing.T) {
	dir := mountTmpfs(t, "1m")
	testtree.Build(t, dir, "file old old content", "dir d")
	fill(t, dir+"/fill")
	m := newMap(t, Config{Dir: dir, Mounts: []Mount{{Sandbox: "/w", Host: dir}}})
	before := testtree.List(t, dir)
	big := bytes.Repeat([]byte("new "), 64<<10)
	for _, p := range []string{"old", "d/new", "n1/n2/new"} {
		tg, err := m.Resolve("/w", p)
		must(t, err)
		_, err = tg.WriteFile(big)
		if !errors.Is(err, ErrNoSpace) || reason(t, err) != "no_space" {
			t.Errorf("WriteFile(%q) on a full disk: %v; want no_space", p, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, `"/w/`+p+`"`) || !strings.Contains(msg, "disk full") {
			t.Errorf("WriteFile(%q): message %q should name the sandbox path and say the disk is full", p, msg)
		}
		if strings.Contains(err.Error(), dir) {
			t.Errorf("WriteFile(%q): message %q names a host path", p, err)
		}
	}
	if after := testtree.List(t, dir); !slices.Equal(after, before) {
		t.Fatalf("a failed write changed the tree:\n%q\nwas:\n%q", after, before)
	}
	noTemps(t, dir)
}

// Every errno that means "no room" is no_space, whatever operation met it.
func TestNoSpaceErrnos(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT} {
		err := fromErrno("write", "/w/f", &os.PathError{Op: "write", Path: ".kennel-tmp-0", Err: errno})
		if !errors.Is(err, ErrNoSpace) || err.Reason != "no_space" || !errors.Is(err, errno) {
			t.Errorf("fromErrno(%v) = %#v; want no_space wrapping the errno", errno, err)
		}
	}
}
