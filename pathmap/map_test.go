package pathmap

import (
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/kennel-dev/kennel/internal/testtree"
)

// fixture is a Map over three host directories:
//
//	/work      -> root/a  (read-write)
//	/work/sub  -> root/b  (read-write, nested in the sandbox, disjoint on the host)
//	/data      -> root/c  (read-only)
type fixture struct {
	root, a, b, c string
	m             *Map
}

const oddName = "\xff\xfe odd\tname"

func newFixture(t *testing.T) *fixture {
	t.Helper()
	root := tempDir(t)
	f := &fixture{root: root, a: root + "/a", b: root + "/b", c: root + "/c"}
	testtree.Build(t, root,
		"dir a/d",
		"file a/d/f hello",
		`file "a/ünï cødé" unicode`,
		"file "+strconv.Quote("a/"+oddName)+" odd",
		"dir a/sub/hidden", // shadowed by the /work/sub mount
		"file a/sub/hidden/h shadowed",
		"symlink a/lin d/f",
		"symlink a/labs $ROOT/a/d",
		"symlink a/lc $ROOT/c/x",
		"symlink a/lsub $ROOT/b",
		"file b/g in b",
		"file c/x in c",
		"file e/z in e",
		"dir outside",
		"file outside/secret SENTINEL",
	)
	f.m = newMap(t, Config{Dir: f.a, Mounts: []Mount{
		{Sandbox: "/work", Host: f.a},
		{Sandbox: "/work/sub/", Host: f.b + "/"},
		{Sandbox: "/data", Host: f.c, ReadOnly: true},
		{Sandbox: "/work/nohost/deep", Host: root + "/e"}, // /work/nohost does not exist on the host
	}})
	return f
}

func TestToHostTable(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		in, want, reason string
	}{
		{"/work", f.a, ""},
		{"/work/", f.a, ""},
		{"/work//d///f", f.a + "/d/f", ""},
		{"/work/./d/.", f.a + "/d", ""},
		{"/work/x/../y", f.a + "/y", ""},
		{"/work/sub", f.b, ""},
		{"/work/sub/g", f.b + "/g", ""},   // deepest mount wins
		{"/work/subx", f.a + "/subx", ""}, // by component, not by string prefix
		{"/work/sub/../d", f.a + "/d", ""},
		{"/data/ünï", f.c + "/ünï", ""},
		{"/work/" + oddName, f.a + "/" + oddName, ""},
		{"/work/\x80\xc0", f.a + "/\x80\xc0", ""}, // invalid UTF-8 passes through as bytes
		{"/", "", "outside"},
		{"/etc/passwd", "", "outside"},
		{"/work/..", "", "outside"},
		{"/work/../etc", "", "outside"},
		{"/wor", "", "outside"},
		{"~", "", "outside"},
		{"~/x", "", "outside"},
		{"~root/x", "", "outside"},
		{"rel/x", "", "outside"},
		{"", "", "invalid"},
		{"/work/a\x00b", "", "invalid"},
		{"/work/" + strings.Repeat("x", MaxPath), "", "invalid"},
	}
	for _, c := range cases {
		got, err := f.m.ToHost(c.in)
		if r := reason(t, err); r != c.reason || got != c.want {
			t.Errorf("ToHost(%q) = %q, %v; want %q, reason %q", c.in, got, err, c.want, c.reason)
		}
		if c.reason == "outside" {
			var fe *FsError
			if !errors.As(err, &fe) || fe.Version != Version || !errors.Is(err, ErrOutside) {
				t.Errorf("ToHost(%q): %#v is not an outside refusal with version", c.in, err)
			}
		}
	}
}

func TestToSandboxTable(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		in, want, reason string
	}{
		{f.a, "/work", ""},
		{f.a + "/", "/work", ""},
		{f.a + "/d/../d/f", "/work/d/f", ""},
		{f.b, "/work/sub", ""},
		{f.b + "/g", "/work/sub/g", ""},
		{f.c + "/x", "/data/x", ""},
		{f.a + "/ünï cødé", "/work/ünï cødé", ""},
		{f.a + "/" + oddName, "/work/" + oddName, ""},
		{f.a + "/sub/hidden", "", "outside"}, // the sandbox sees /work/sub as root/b
		{f.root, "", "outside"},
		{f.root + "/outside/secret", "", "outside"},
		{"/", "", "outside"},
		{"relative", "", "invalid"},
	}
	for _, c := range cases {
		got, err := f.m.ToSandbox(c.in)
		if r := reason(t, err); r != c.reason || got != c.want {
			t.Errorf("ToSandbox(%q) = %q, %v; want %q, reason %q", c.in, got, err, c.want, c.reason)
		}
	}
}

func TestResolveTable(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		cwd, path    string
		host, sb     string // wanted Host and Sandbox
		exists       bool
		reason       string
		readOnly     bool
		isDir, isReg bool
	}{
		{cwd: "/work", path: "d/f", host: f.a + "/d/f", sb: "/work/d/f", exists: true, isReg: true},
		{cwd: "/work/d", path: "f", host: f.a + "/d/f", sb: "/work/d/f", exists: true, isReg: true},
		{cwd: "/work/d/", path: "./f", host: f.a + "/d/f", sb: "/work/d/f", exists: true, isReg: true},
		{cwd: "/work/d/", path: "./f/", reason: "not_found"}, // a file is not a directory
		{cwd: "/work/d/", path: "f/.", reason: "not_found"},
		{cwd: "/work", path: "d/", host: f.a + "/d", sb: "/work/d", exists: true, isDir: true},
		{cwd: "/work", path: "lin/", reason: "not_found"},
		{cwd: "/work/d", path: "../d/./f", host: f.a + "/d/f", sb: "/work/d/f", exists: true, isReg: true},
		{cwd: "/work/d/..", path: "d/f", host: f.a + "/d/f", sb: "/work/d/f", exists: true, isReg: true},
		{cwd: "", path: "d/f", host: f.a + "/d/f", sb: "/work/d/f", exists: true, isReg: true}, // cwd "" is Dir
		{cwd: "/data", path: "/work/d", host: f.a + "/d", sb: "/work/d", exists: true, isDir: true},
		{cwd: "/work", path: ".", host: f.a, sb: "/work", exists: true, isDir: true},
		{cwd: "/work", path: "sub/g", host: f.b + "/g", sb: "/work/sub/g", exists: true, isReg: true},
		{cwd: "/work/sub", path: "..", host: f.a, sb: "/work", exists: true, isDir: true},
		{cwd: "/work/sub", path: "../d/f", host: f.a + "/d/f", sb: "/work/d/f", exists: true, isReg: true},
		{cwd: "/work", path: "sub/hidden", host: f.b + "/hidden", sb: "/work/sub/hidden"}, // shadowed on the host
		{cwd: "/work", path: "ünï cødé", host: f.a + "/ünï cødé", sb: "/work/ünï cødé", exists: true, isReg: true},
		{cwd: "/work", path: oddName, host: f.a + "/" + oddName, sb: "/work/" + oddName, exists: true, isReg: true},
		{cwd: "/work", path: "/data/x", host: f.c + "/x", sb: "/data/x", exists: true, readOnly: true, isReg: true},
		// Symlinks are followed and the reply path is where they lead.
		{cwd: "/work", path: "lin", host: f.a + "/d/f", sb: "/work/d/f", exists: true, isReg: true},
		{cwd: "/work", path: "labs/f", host: f.a + "/d/f", sb: "/work/d/f", exists: true, isReg: true},
		{cwd: "/work", path: "lc", host: f.c + "/x", sb: "/data/x", exists: true, readOnly: true, isReg: true},
		{cwd: "/work", path: "lsub/g", host: f.b + "/g", sb: "/work/sub/g", exists: true, isReg: true},
		{cwd: "/work/labs", path: "f", host: f.a + "/d/f", sb: "/work/d/f", exists: true, isReg: true}, // symlinked cwd
		{cwd: "/work", path: "nohost/deep/z", host: f.root + "/e/z", sb: "/work/nohost/deep/z", exists: true, isReg: true},
		{cwd: "/work/nohost/deep", path: "z", host: f.root + "/e/z", sb: "/work/nohost/deep/z", exists: true, isReg: true},
		// Missing parts become the tail.
		{cwd: "/work", path: "nohost/y", host: f.a + "/nohost/y", sb: "/work/nohost/y"},
		{cwd: "/work", path: "new/dir/file", host: f.a + "/new/dir/file", sb: "/work/new/dir/file"},
		{cwd: "/work", path: "d/new", host: f.a + "/d/new", sb: "/work/d/new"},
		{cwd: "/work", path: "new/../x", reason: "not_found"},
		{cwd: "/work", path: "d/f/x", reason: "not_found"},
		{cwd: "/work", path: "d/f/..", reason: "not_found"},
		// Refusals.
		{cwd: "/work", path: "~", reason: "outside"},
		{cwd: "/work", path: "~/x", reason: "outside"},
		{cwd: "/work", path: "~user/x", reason: "outside"},
		{cwd: "/work", path: "..", reason: "outside"},
		{cwd: "/work", path: "../..", reason: "outside"},
		{cwd: "/work", path: "/etc/passwd", reason: "outside"},
		{cwd: "/work", path: "/", reason: "outside"},
		{cwd: "/etc", path: "/work/d/f", reason: "outside"},
		{cwd: "~", path: "d", reason: "outside"},
		{cwd: "/work/nope", path: "x", reason: "not_found"},
		{cwd: "/work/d/f", path: "x", reason: "not_found"},
		{cwd: "work", path: "x", reason: "invalid"},
		{cwd: "/work", path: "", reason: "invalid"},
		{cwd: "/work", path: "a\x00b", reason: "invalid"},
	}
	for _, c := range cases {
		got, err := f.m.Resolve(c.cwd, c.path)
		if r := reason(t, err); r != c.reason {
			t.Errorf("Resolve(%q, %q): %v; want reason %q", c.cwd, c.path, err, c.reason)
			continue
		}
		if err != nil {
			continue
		}
		if got.Host() != c.host || got.Sandbox() != c.sb || got.Exists() != c.exists ||
			got.ReadOnly() != c.readOnly || got.IsDir() != c.isDir || got.IsRegular() != c.isReg {
			t.Errorf("Resolve(%q, %q) = host %q sandbox %q exists %v ro %v dir %v reg %v; want %q %q %v %v %v %v",
				c.cwd, c.path, got.Host(), got.Sandbox(), got.Exists(), got.ReadOnly(), got.IsDir(), got.IsRegular(),
				c.host, c.sb, c.exists, c.readOnly, c.isDir, c.isReg)
		}
		// The reply path maps back to the same host path.
		if h, err := f.m.ToHost(got.Sandbox()); err != nil || h != got.Host() {
			t.Errorf("ToHost(Sandbox()) of %q = %q, %v; want %q", c.path, h, err, got.Host())
		}
	}
}

func TestResolveEntryTable(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		path, sb, reason string
		exists, symlink  bool
	}{
		{path: "lin", sb: "/work/lin", exists: true, symlink: true}, // the link itself
		{path: "lc", sb: "/work/lc", exists: true, symlink: true},
		{path: "d/f", sb: "/work/d/f", exists: true},
		{path: "labs/f", sb: "/work/d/f", exists: true},
		{path: "new", sb: "/work/new"},
		{path: "new/deeper", sb: "/work/new/deeper"},
		{path: "sub", reason: "invalid"}, // a mount's root
		{path: "/work", reason: "invalid"},
		{path: "d/..", reason: "invalid"},
		{path: ".", reason: "invalid"},
		{path: "../x", reason: "outside"},
		{path: "/x", reason: "outside"},
	}
	for _, c := range cases {
		got, err := f.m.ResolveEntry("/work", c.path)
		if r := reason(t, err); r != c.reason {
			t.Errorf("ResolveEntry(%q): %v; want reason %q", c.path, err, c.reason)
			continue
		}
		if err == nil && (got.Sandbox() != c.sb || got.Exists() != c.exists || got.IsSymlink() != c.symlink) {
			t.Errorf("ResolveEntry(%q) = %q exists %v symlink %v; want %q %v %v",
				c.path, got.Sandbox(), got.Exists(), got.IsSymlink(), c.sb, c.exists, c.symlink)
		}
	}
}

func TestNewIdentityAndStart(t *testing.T) {
	root := tempDir(t)
	testtree.Build(t, root, "dir proj/src", "dir other", "symlink proj/out ../other")
	m := newMap(t, Config{Dir: root + "/proj"})
	if got := m.Mounts(); len(got) != 1 || got[0].Sandbox != root+"/proj" || got[0].Host != root+"/proj" || got[0].ReadOnly {
		t.Fatalf("identity mounts = %+v", got)
	}
	if m.Dir() != root+"/proj" {
		t.Fatalf("Dir = %q", m.Dir())
	}
	if d, err := m.StartDir(root + "/proj/src"); err != nil || d != root+"/proj/src" {
		t.Fatalf("StartDir(src) = %q, %v", d, err)
	}
	for _, dir := range []string{root + "/other", root + "/proj/out", "/"} {
		if _, err := m.StartDir(dir); reason(t, err) != "outside" {
			t.Errorf("StartDir(%q): %v; want outside", dir, err)
		}
	}
	// A working directory outside every mount stops the start.
	_, err := New(Config{Dir: root + "/other", Mounts: []Mount{{Sandbox: "/work", Host: root + "/proj"}}})
	if !errors.Is(err, ErrOutside) {
		t.Fatalf("New with Dir outside: %v; want ErrOutside", err)
	}
	// So does one that resolves outside through a symlink.
	_, err = New(Config{Dir: root + "/proj/out", Mounts: []Mount{{Sandbox: "/work", Host: root + "/proj"}}})
	if !errors.Is(err, ErrOutside) {
		t.Fatalf("New with Dir through a symlink out: %v; want ErrOutside", err)
	}
}

func TestNewRefusesBadMounts(t *testing.T) {
	root := tempDir(t)
	testtree.Build(t, root, "dir a", "file f")
	cases := []Config{
		{Dir: "rel"},
		{Dir: root + "/a", Mounts: []Mount{{Sandbox: "work", Host: root + "/a"}}},
		{Dir: root + "/a", Mounts: []Mount{{Sandbox: "/work", Host: "a"}}},
		{Dir: root + "/a", Mounts: []Mount{{Sandbox: "/work", Host: root + "/missing"}}},
		{Dir: root + "/a", Mounts: []Mount{{Sandbox: "/work", Host: root + "/f"}}},
		{Dir: root + "/a", Mounts: []Mount{{Sandbox: "/work", Host: root + "/a"}, {Sandbox: "/work/", Host: root}}},
	}
	for _, c := range cases {
		m, err := New(c)
		if err == nil {
			m.Close()
			t.Errorf("New(%+v) succeeded", c)
			continue
		}
		var fe *FsError
		if !errors.As(err, &fe) || fe.Code() == "" {
			t.Errorf("New(%+v): %v is not a coded FsError", c, err)
		}
	}
}

func TestErrorMessageNamesNoHostPath(t *testing.T) {
	f := newFixture(t)
	testtree.Build(t, f.a, "symlink lout "+f.root+"/outside")
	for _, p := range []string{"lout/secret", "lout/../x\nforged line"} {
		_, err := f.m.Resolve("/work", p)
		if reason(t, err) != "outside" {
			t.Fatalf("Resolve(%q): %v; want outside", p, err)
		}
		if msg := err.Error(); strings.Contains(msg, f.root) || strings.Contains(msg, "\n") {
			t.Errorf("message %q names a host path or holds a raw newline", msg)
		}
	}
}

func TestOpenReadsCheckedFile(t *testing.T) {
	f := newFixture(t)
	file, tg, err := f.m.open("/work", "lin")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	b, err := io.ReadAll(file)
	if err != nil || string(b) != "hello" || tg.Sandbox() != "/work/d/f" {
		t.Fatalf("read %q, %v at %q", b, err, tg.Sandbox())
	}
	for p, want := range map[string]string{"d": "invalid", "nope": "not_found", "/etc/passwd": "outside"} {
		if _, _, err := f.m.open("/work", p); reason(t, err) != want {
			t.Errorf("Open(%q): %v; want %s", p, err, want)
		}
	}
	testtree.Build(t, f.a, "fifo p")
	if _, _, err := f.m.open("/work", "p"); reason(t, err) != "invalid" {
		t.Errorf("Open(fifo): %v; want invalid", err)
	}
}

func TestMountsSortedDeepestFirst(t *testing.T) {
	f := newFixture(t)
	ms := f.m.Mounts()
	if ms[0].Sandbox != "/work/nohost/deep" || ms[1].Sandbox != "/work/sub" || ms[1].Host != f.b {
		t.Fatalf("Mounts() = %+v; want the deepest first, cleaned", ms)
	}
}
