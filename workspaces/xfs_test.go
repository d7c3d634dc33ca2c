package workspaces

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kennel-dev/kennel/internal/testneed"
)

// mountXFS makes an XFS file system with reflinks on a loop device of size bytes, mounts
// it and returns the mount point. The mount and the loop device go at the test's end.
func mountXFS(t testing.TB, size int64) string {
	t.Helper()
	testneed.Root(t)                                            // to make a loop device and mount it
	testneed.Tools(t, "mkfs.xfs", "losetup", "mount", "umount") // xfsprogs, util-linux
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "xfs.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	run("mkfs.xfs", "-q", "-m", "reflink=1", img)
	dev := run("losetup", "--find", "--show", img)
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	mnt := filepath.Join(dir, "mnt")
	os.Mkdir(mnt, 0o755)
	run("mount", dev, mnt)
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			exec.Command("umount", "-l", mnt).Run()
			t.Logf("umount %s: %v %s", mnt, err, out)
		}
	})
	return mnt
}

// fiemapShared reports whether every extent of the file at p is shared with another file
// (FIEMAP_EXTENT_SHARED), and how many extents it has.
func fiemapShared(t testing.TB, p string) (bool, int) {
	t.Helper()
	const (
		fsIocFiemap  = 0xC020660B
		flagSync     = 0x1
		extentShared = 0x2000
		headerSize   = 32
		extentSize   = 56
		maxExtents   = 64
	)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]uint64, (headerSize+extentSize*maxExtents)/8)
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), len(buf)*8)
	binary.NativeEndian.PutUint64(raw[8:], ^uint64(0))  // fm_length
	binary.NativeEndian.PutUint32(raw[16:], flagSync)   // fm_flags
	binary.NativeEndian.PutUint32(raw[24:], maxExtents) // fm_extent_count
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&buf[0]))); errno != 0 {
		t.Fatalf("FIEMAP %s: %v", p, errno)
	}
	n := int(binary.NativeEndian.Uint32(raw[20:])) // fm_mapped_extents
	shared := n > 0
	for i := range n {
		flags := binary.NativeEndian.Uint32(raw[headerSize+i*extentSize+40:])
		if flags&extentShared == 0 {
			shared = false
		}
	}
	return shared, n
}

// TestReflinkOnXFS makes a real XFS file system on a loop device and checks Create clones
// every file (FICLONE): the counts say so, no warning, and FIEMAP finds the child's copy,
// the base and the parent's file sharing their extents. A hand-back's take is a clone too.
func TestReflinkOnXFS(t *testing.T) {
	mnt := mountXFS(t, 512<<20)
	parent := filepath.Join(mnt, "parent")
	os.Mkdir(parent, 0o755)
	big := make([]byte, 4<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	if err := os.WriteFile(filepath.Join(parent, "big"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		os.WriteFile(filepath.Join(parent, fmt.Sprintf("small%d", i)), []byte(strings.Repeat("s", 5000+i)), 0o644)
	}
	unix.Sync()
	res := mustCreate(t, parent, filepath.Join(mnt, "state"), "c")
	// The small files' base is a digest when their bytes are cached; big's is a clone.
	if res.Copied != 0 || res.Cloned+res.Digested != 22 || res.Digested > 10 {
		t.Fatalf("cloned %d copied %d digested %d, want 22 clones and digests, no copy", res.Cloned, res.Copied, res.Digested)
	}
	// Without digests, every base file is a clone too.
	all, err := Create(context.Background(), parent, CreateOptions{State: filepath.Join(mnt, "state"), ID: "all", DigestMax: -1, Logger: quiet()})
	if err != nil || all.Cloned != 22 || all.Copied != 0 || all.Digested != 0 {
		t.Fatalf("without digests: %+v %v, want 22 clones", all, err)
	}
	if shared, n := fiemapShared(t, filepath.Join(all.Base(), "small3")); !shared {
		t.Fatalf("the base's small3: %d extents, not all shared", n)
	}
	for _, p := range []string{filepath.Join(res.Path(), "big"), filepath.Join(res.Base(), "big"), filepath.Join(parent, "big"), filepath.Join(res.Path(), "small3")} {
		if shared, n := fiemapShared(t, p); !shared {
			t.Fatalf("%s: %d extents, not all shared", p, n)
		}
	}
	// A file written fresh shares nothing: the check can fail.
	os.WriteFile(filepath.Join(mnt, "fresh"), big, 0o644)
	if shared, _ := fiemapShared(t, filepath.Join(mnt, "fresh")); shared {
		t.Fatalf("a fresh file reads as shared")
	}
	// The child's new file comes back as a clone of its copy.
	os.WriteFile(filepath.Join(res.Path(), "new"), big, 0o644)
	unix.Sync()
	ws := res.Workspace
	if _, err := HandBack(context.Background(), ws.Path(), HandBackOptions{Step: func(name string) error {
		if name == "renamed new" {
			if shared, n := fiemapShared(t, filepath.Join(parent, "new")); !shared {
				return fmt.Errorf("the taken file shares %d extents with none", n)
			}
		}
		return nil
	}}); err != nil {
		t.Fatal(err)
	}
}
