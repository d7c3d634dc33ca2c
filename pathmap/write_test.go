package pathmap

import (
	"errors"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testtree"
)

func TestWriteFile(t *testing.T) {
	f := newFixture(t)
	must(t, os.Chmod(f.a+"/d/f", 0o600))
	cases := []struct {
		path, content string
		created       bool
		host          string
		mode          os.FileMode
	}{
		{"d/f", "new content", false, f.a + "/d/f", 0o600},           // keeps the mode
		{"lin", "through the link", false, f.a + "/d/f", 0o600},      // writes the link's target
		{"n1/n2/n3.txt", "deep", true, f.a + "/n1/n2/n3.txt", 0o644}, // creates parents
		{"sub/new", "in b", true, f.b + "/new", 0o644},
		{"nohost/deep/w", "in e", true, f.root + "/e/w", 0o644},
		{"nohost/y", "made nohost", true, f.a + "/nohost/y", 0o644},
	}
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	for _, c := range cases {
		tg, err := f.m.Resolve("/work", c.path)
		if err != nil {
			t.Fatalf("Resolve(%q): %v", c.path, err)
		}
		created, err := tg.WriteFile([]byte(c.content))
		if err != nil || created != c.created {
			t.Fatalf("WriteFile(%q) = %v, %v; want created %v", c.path, created, err, c.created)
		}
		b, err := os.ReadFile(c.host)
		if err != nil || string(b) != c.content {
			t.Fatalf("%s = %q, %v", c.host, b, err)
		}
		if fi, _ := os.Lstat(c.host); fi.Mode() != c.mode {
			t.Errorf("%s mode %v; want %v", c.host, fi.Mode(), c.mode)
		}
	}
	if fi, _ := os.Lstat(f.a + "/lin"); fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the symlink was replaced")
	}
	// No temporary files are left behind.
	for _, dir := range []string{f.a, f.a + "/d", f.a + "/n1/n2"} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".kennel-tmp-") {
				t.Errorf("temporary file %s/%s left", dir, e.Name())
			}
		}
	}
}

func TestWriteFileRefusals(t *testing.T) {
	f := newFixture(t)
	testtree.Build(t, f.a, "fifo p")
	before := testtree.List(t, f.c)
	cases := []struct{ path, reason string }{
		{"/data/x", "read_only"},
		{"/data/new/file", "read_only"},
		{"lc", "read_only"}, // a link into a read-only mount
		{"d", "invalid"},
		{"/work", "invalid"},
		{"p", "invalid"},
	}
	for _, c := range cases {
		tg, err := f.m.Resolve("/work", c.path)
		if err != nil {
			t.Fatalf("Resolve(%q): %v", c.path, err)
		}
		_, err = tg.WriteFile([]byte("x"))
		if reason(t, err) != c.reason {
			t.Errorf("WriteFile(%q): %v; want %s", c.path, err, c.reason)
		}
		if c.reason == "read_only" && (!errors.Is(err, ErrReadOnly) || err.(*FsError).Version != Version) {
			t.Errorf("WriteFile(%q): %#v is not a versioned read_only refusal", c.path, err)
		}
	}
	if after := testtree.List(t, f.c); !slices.Equal(after, before) {
		t.Fatalf("read-only mount changed")
	}
}

func TestRename(t *testing.T) {
	f := newFixture(t)
	testtree.Build(t, f.a, "file m/one 1", "file m/two 2", "symlink m/link one")
	entry := func(p string) Target {
		t.Helper()
		tg, err := f.m.ResolveEntry("/work", p)
		if err != nil {
			t.Fatalf("ResolveEntry(%q): %v", p, err)
		}
		return tg
	}
	// A plain rename, a symlink moved as itself, a move into a new directory.
	must(t, Rename(entry("m/one"), entry("m/uno")))
	must(t, Rename(entry("m/link"), entry("m/new/dir/link")))
	if b, _ := os.ReadFile(f.a + "/m/uno"); string(b) != "1" {
		t.Fatalf("m/uno = %q", b)
	}
	if l, err := os.Readlink(f.a + "/m/new/dir/link"); err != nil || l != "one" {
		t.Fatalf("link moved as %q, %v", l, err)
	}
	// Across mounts (same file system here): a rename; EXDEV would copy.
	must(t, Rename(entry("m/two"), entry("sub/two")))
	if b, _ := os.ReadFile(f.b + "/two"); string(b) != "2" {
		t.Fatalf("sub/two = %q", b)
	}
	if _, err := os.Lstat(f.a + "/m/two"); !os.IsNotExist(err) {
		t.Fatalf("m/two still there: %v", err)
	}
	// Refusals change nothing.
	testtree.Build(t, f.a, "file m/three 3")
	before := testtree.List(t, f.root)
	cases := []struct {
		from, to, reason string
	}{
		{"m/three", "m/uno", "exists"},
		{"m/three", "d", "exists"},
		{"m/missing", "m/x", "not_found"},
		{"m/three", "/data/three", "read_only"},
		{"/data/x", "m/x", "read_only"},
		{"m", "m/inside/itself", "invalid"},
	}
	for _, c := range cases {
		err := Rename(entry(c.from), entry(c.to))
		if reason(t, err) != c.reason {
			t.Errorf("Rename(%q, %q): %v; want %s", c.from, c.to, err, c.reason)
		}
	}
	for _, p := range []string{"sub", "/data", "/work"} {
		if _, err := f.m.ResolveEntry("/work", p); reason(t, err) != "invalid" {
			t.Errorf("ResolveEntry(%q) (a mount root): %v; want invalid", p, err)
		}
	}
	if after := testtree.List(t, f.root); !slices.Equal(after, before) {
		t.Fatalf("a refused rename changed the tree:\n%q\nwas:\n%q", after, before)
	}
}

// A rename across file systems copies a regular file and refuses a directory. /dev/shm
// is a tmpfs on Linux, distinct from the temporary directory's file system.
func TestRenameCrossDevice(t *testing.T) {
	root := tempDir(t)
	shm, err := os.MkdirTemp("/dev/shm", "pathmap")
	if err != nil {
		testneed.Missing(t, "/dev/shm (a second file system)", err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	var a, b syscall.Statfs_t
	must(t, syscall.Statfs(root, &a))
	must(t, syscall.Statfs(shm, &b))
	testneed.Need(t, a.Type != b.Type || a.Fsid != b.Fsid, "a /dev/shm on another file system than the temporary directory")
	testtree.Build(t, root, "file f data", "dir d")
	must(t, os.Chmod(root+"/f", 0o640))
	m := newMap(t, Config{Dir: root, Mounts: []Mount{{Sandbox: "/w", Host: root}, {Sandbox: "/s", Host: shm}}})
	from, _ := m.ResolveEntry("/w", "f")
	to, _ := m.ResolveEntry("/w", "/s/f")
	must(t, Rename(from, to))
	if b, err := os.ReadFile(shm + "/f"); err != nil || string(b) != "data" {
		t.Fatalf("copied file = %q, %v", b, err)
	}
	if fi, _ := os.Stat(shm + "/f"); fi.Mode() != 0o640 {
		t.Errorf("copied mode %v", fi.Mode())
	}
	if _, err := os.Lstat(root + "/f"); !os.IsNotExist(err) {
		t.Fatalf("source still there: %v", err)
	}
	from, _ = m.ResolveEntry("/w", "d")
	to, _ = m.ResolveEntry("/w", "/s/made/d")
	if err := Rename(from, to); !errors.Is(err, ErrCrossDevice) {
		t.Fatalf("directory across file systems: %v; want ErrCrossDevice", err)
	}
	if _, err := os.Lstat(shm + "/made"); !os.IsNotExist(err) {
		t.Fatalf("the refused rename left the directory it made: %v", err)
	}
	if _, err := os.Stat(root + "/d"); err != nil {
		t.Fatalf("directory gone: %v", err)
	}
}
