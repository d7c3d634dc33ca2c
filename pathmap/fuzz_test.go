package pathmap

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kennel-dev/kennel/internal/testtree"
)

// fuzzTree is the tree FuzzMap resolves in: nested and sibling mounts, symlinks in, out,
// across mounts, in loops and through "..", and a sentinel outside.
var fuzzTree = []string{
	"file outside/secret " + sentinel,
	"dir a/d/e",
	"file a/d/f inside",
	"file a/d/e/g deep",
	"dir a/sub/hidden",
	"file b/g in b",
	"file c/x in c",
	"symlink a/abs $ROOT/outside",
	"symlink a/rel ../outside",
	"symlink a/d/up ..",
	"symlink a/d/up2 ../..",
	"symlink a/d/e/top ../../../a",
	"symlink a/toc $ROOT/c",
	"symlink a/tocrel ../c",
	"symlink a/tob ../b/g",
	"symlink a/loop1 loop2",
	"symlink a/loop2 loop1",
	"symlink a/dd $ROOT/outside/../a/d",
	"symlink a/root /",
	"symlink a/magic /proc/self/root$ROOT/a",
	"symlink b/back ../a/d",
	"symlink b/out ../../",
	"symlink c/y ../a/d/f",
	"symlink c/esc ../outside/secret",
}

func FuzzMap(f *testing.F) {
	root := tempDir(f)
	testtree.Build(f, root, fuzzTree...)
	mounts := []Mount{
		{Sandbox: "/work", Host: root + "/a"},
		{Sandbox: "/work/sub", Host: root + "/b"},
		{Sandbox: "/data", Host: root + "/c", ReadOnly: true},
	}
	m := newMap(f, Config{Dir: root + "/a", Mounts: mounts})
	reals := []string{root + "/a", root + "/b", root + "/c"}
	for _, seed := range [][2]string{
		{"/work", "d/f"}, {"/work/d", "../sub/g"}, {"/work", "abs/secret"}, {"/work", "rel/secret"},
		{"/work/d", "up/up/up2/d/e/top/d"}, {"/work", "toc/y"}, {"/work", "tocrel/esc"}, {"/work", "loop1"},
		{"/work", "dd/f"}, {"/work", "root/etc/passwd"}, {"/work", "magic"}, {"/work/sub", "back/f"},
		{"/work/sub", "out/outside/secret"}, {"/data", "../work/./d//e/"}, {"/", "work"}, {"~", "x"},
		{"/work", "~/x"}, {"/work", "new/../x"}, {"/work", "d/f/x"}, {"", "\xff/\x00"}, {"/work", "sub/hidden"},
		{"/work/toc", "y"}, {"/work", "tob/.."},
	} {
		f.Add(seed[0], seed[1], false)
		f.Add(seed[0], seed[1], true)
	}
	f.Fuzz(func(t *testing.T, cwd, path string, entry bool) {
		var tg Target
		var err error
		if entry {
			tg, err = m.ResolveEntry(cwd, path)
		} else {
			tg, err = m.Resolve(cwd, path)
		}
		if err != nil {
			fe, ok := err.(*FsError)
			if !ok || fe.Code() == "" {
				t.Fatalf("error %v (%T) carries no code", err, err)
			}
			if (fe.Reason == "outside" || fe.Reason == "read_only") != (fe.Version == Version) {
				t.Fatalf("error %#v: version wrong for its reason", fe)
			}
			return
		}
		host := tg.Host()
		// Lexically inside the mount it names, and inside some mount at all.
		if !inside(host, tg.mnt.real) || !inside(host, reals...) || filepath.Clean(host) != host {
			t.Fatalf("Resolve(%q, %q) = %q: not lexically inside a mount", cwd, path, host)
		}
		// After resolution on the host: the longest existing part resolves inside a mount.
		existing := host
		for {
			if _, err := os.Lstat(existing); err == nil {
				break
			}
			existing = filepath.Dir(existing)
		}
		check := existing
		if entry && existing == host {
			check = filepath.Dir(existing) // the entry itself may be a symlink: not followed
		}
		real, err := filepath.EvalSymlinks(check)
		if err != nil {
			t.Fatalf("EvalSymlinks(%q): %v", check, err)
		}
		if !inside(real, reals...) {
			t.Fatalf("Resolve(%q, %q) = %q resolves to %q, outside every mount", cwd, path, host, real)
		}
		// The reply path maps back to the same host path, and never contains "." or "..".
		sb := tg.Sandbox()
		if filepath.Clean(sb) != sb || strings.Contains(sb, "/../") {
			t.Fatalf("Sandbox() = %q is not clean", sb)
		}
		if h, err := m.ToHost(sb); err != nil || h != host {
			t.Fatalf("ToHost(%q) = %q, %v; want %q", sb, h, err, host)
		}
	})
}
