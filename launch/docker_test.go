package launch

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	"github.com/kennel-dev/kennel/sessionspec"
)

// TestADockerSessionsFilesBelongToItsKernel: a Docker session assembled from its
// description runs as a non-root uid, and the files and directories fs.write creates for
// it on the host belong to that uid, as the files the kernel writes itself do (the
// hardening issue, item 16: they were root's when kennel ran as root).
func TestADockerSessionsFilesBelongToItsKernel(t *testing.T) {
	dockerneed.KernelEngine(t)
	testneed.Root(t)
	// Run as root, the kernel takes the uid of the directory it works in (never root):
	// give it one that is neither root nor this process.
	dir := t.TempDir()
	if err := os.Chown(dir, 4242, 4343); err != nil {
		t.Fatal(err)
	}
	kit := New(Options{})
	t.Cleanup(func() { _ = kit.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, _ := startAssembled(t, kit, &sessionspec.Transport{Docker: &sessionspec.Docker{}}, dir)
	res, err := s.Execute(ctx, "import os, kennel\nopen('own.txt', 'w').close()\nkennel.fs.write('made/by/host.txt', 'x')\n(os.getuid(), os.getgid())", nil)
	if err != nil || res.Status != "ok" || res.Result == nil {
		t.Fatalf("cell: %+v %+v, %v", res, res.Error, err)
	}
	ids := strings.Trim(*res.Result, "()")
	uid, gid, _ := strings.Cut(ids, ", ")
	if uid != "4242" || gid != "4343" {
		t.Fatalf("the kernel runs as %s, want the directory's owner 4242:4343", ids)
	}
	for _, rel := range []string{"own.txt", "made", "made/by", "made/by/host.txt"} {
		fi, err := os.Lstat(filepath.Join(dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if strconv.Itoa(int(st.Uid)) != uid || strconv.Itoa(int(st.Gid)) != gid {
			t.Errorf("%s is %d:%d, the kernel is %s:%s", rel, st.Uid, st.Gid, uid, gid)
		}
	}
}
