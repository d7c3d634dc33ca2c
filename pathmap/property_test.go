package pathmap

import (
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"pgregory.net/rapid"

	"github.com/kennel-dev/kennel/internal/testtree"
)

// With the identity map, the walk must agree with the host kernel's own resolution: every
// path Resolve accepts and finds, the kernel resolves (open O_PATH, read /proc/self/fd) to
// exactly the Target's host path; every path it accepts lies inside the mount.
// Trees and paths are generated: directories, files, and symlinks whose targets go up,
// down, across, out and round in loops.
func TestResolveAgreesWithHost(t *testing.T) {
	base := tempDir(t)
	compared := 0
	rapid.Check(t, func(rt *rapid.T) {
		root, err := os.MkdirTemp(base, "t")
		must(t, err)
		mnt := root + "/m"
		testtree.Build(rt, root, "dir m/d0/d1", "file o/f0 "+sentinel, "file m/f0 f0", "file m/d0/f0 d0f0")
		targets := []string{
			".", "..", "../..", "d0", "d0/d1", "f0", "../f0", "../o", "../o/f0", "l0", "l1", "l2",
			"d1/../f0", "../m/d0", "nope", mnt, mnt + "/d0", mnt + "/../o", mnt + "/d0/../f0", "/", root,
			mnt + "/l0", root + "/o/../m/f0",
		}
		dirs := []string{"", "d0", "d0/d1"}
		for i := range 3 {
			dir := rapid.SampledFrom(dirs).Draw(rt, "linkdir")
			target := rapid.SampledFrom(targets).Draw(rt, "target")
			testtree.Build(rt, mnt, "symlink "+path.Join(dir, "l"+strconv.Itoa(i))+" "+target)
		}
		m, err := New(Config{Dir: mnt})
		if err != nil {
			rt.Fatalf("New: %v", err)
		}
		defer m.Close()
		parts := rapid.SliceOfN(rapid.SampledFrom([]string{"d0", "d1", "f0", "l0", "l1", "l2", "..", ".", "m", "new"}), 0, 6).Draw(rt, "parts")
		cwd := rapid.SampledFrom([]string{mnt, mnt + "/d0", mnt + "/d0/d1", mnt + "/l0"}).Draw(rt, "cwd")
		p := strings.Join(parts, "/")
		if p == "" {
			p = "."
		}
		tg, err := m.Resolve(cwd, p)
		if err != nil {
			switch r := err.(*FsError).Reason; r {
			case "outside", "not_found", "loop":
			default:
				rt.Fatalf("Resolve(%q, %q): unexpected %v", cwd, p, err)
			}
			return
		}
		if !inside(tg.Host(), mnt) {
			rt.Fatalf("Resolve(%q, %q) = %q: outside the mount", cwd, p, tg.Host())
		}
		if !tg.Exists() {
			return
		}
		got, err := realpathAt(cwd, p)
		if err != nil || got != tg.Host() {
			rt.Fatalf("Resolve(%q, %q) = %q; the kernel resolves it to %q, %v", cwd, p, tg.Host(), got, err)
		}
		compared++
	})
	t.Logf("%d accepted paths compared with the kernel's resolution", compared)
	if compared < 10 {
		t.Fatalf("only %d paths compared: the generator is too narrow", compared)
	}
}

// realpathAt resolves p relative to dir the way the kernel does (".." after a symlink
// leaves the symlink's target), by opening it and reading /proc/self/fd.
func realpathAt(dir, p string) (string, error) {
	full := p
	if !filepath.IsAbs(p) {
		full = dir + "/" + p
	}
	fd, err := unix.Open(full, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	return os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
}
