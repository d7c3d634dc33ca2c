package fshost

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testtree"
	"github.com/kennel-dev/kennel/pathmap"
)

func TestWrite(t *testing.T) {
	e := newEnv(t, Options{}, "file w/exists old\n", "symlink w/link exists", "file r/ro ro\n", "dir w/dir")
	must(t, os.Chmod(e.work+"/exists", 0o600))
	cases := []struct {
		args, absolute, host, content, reason string
		created                               bool
	}{
		{args: `{"path": "exists", "content": "new\n"}`, absolute: "/work/exists", host: "w/exists", content: "new\n"},
		{args: `{"path": "link", "content": "via link"}`, absolute: "/work/exists", host: "w/exists", content: "via link"},
		{args: `{"path": "a/b/c.txt", "content": "deep"}`, absolute: "/work/a/b/c.txt", host: "w/a/b/c.txt", content: "deep", created: true},
		{args: `{"path": "rel", "content": "", "cwd": "/work/a"}`, absolute: "/work/a/rel", host: "w/a/rel", content: "", created: true},
		{args: `{"path": "/ro/ro", "content": "x"}`, reason: "read_only"},
		{args: `{"path": "/ro/new", "content": "x"}`, reason: "read_only"},
		{args: `{"path": "dir", "content": "x"}`, reason: "invalid"},
		{args: `{"content": "x"}`, reason: "invalid"},
	}
	for _, c := range cases {
		var r WriteResult
		err := e.call(t, "fs.write", c.args, &r)
		if code(err) != c.reason {
			t.Errorf("fs.write %s: %v; want %q", c.args, err, c.reason)
			continue
		}
		if err != nil {
			if c.reason == "read_only" && Describe(err).Version != "transport@1" {
				t.Errorf("fs.write %s: read_only without version", c.args)
			}
			continue
		}
		if r.Absolute != c.absolute || r.Created != c.created || r.Bytes != len(c.content) {
			t.Errorf("fs.write %s = %+v", c.args, r)
		}
		if b, err := os.ReadFile(e.root + "/" + c.host); err != nil || string(b) != c.content {
			t.Errorf("%s = %q, %v", c.host, b, err)
		}
	}
	if fi, _ := os.Stat(e.work + "/exists"); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode not kept: %v", fi.Mode())
	}
	if b, _ := os.ReadFile(e.ro + "/ro"); string(b) != "ro\n" {
		t.Errorf("read-only file changed")
	}
}

func TestEdit(t *testing.T) {
	e := newEnv(t, Options{},
		"file w/f.go func a() {}\nfunc b() {}\n// b\n",
		"file w/g g\n",
		"file w/bin \x00\x01",
		"file r/ro ro\n",
		"symlink w/link f.go",
	)
	read := func(p string) string {
		b, _ := os.ReadFile(e.root + "/" + p)
		return string(b)
	}
	// Refusals first: each leaves everything as it was.
	refusals := []struct{ args, reason string }{
		{`{"path": "f.go", "edits": [{"old": "func c", "new": "x"}]}`, "no_match"},
		{`{"path": "f.go", "edits": [{"old": "func", "new": "x"}]}`, "ambiguous"},
		{`{"path": "f.go", "edits": [{"old": "func a", "new": "fn a"}, {"old": "missing", "new": ""}]}`, "no_match"},
		{`{"path": "f.go", "edits": [{"old": "func a", "new": "func b"}, {"old": "func b", "new": "x"}]}`, "ambiguous"},
		{`{"path": "f.go", "edits": [{"old": "func a", "new": "fn a"}], "moves": [{"from": "g", "to": "f.go"}]}`, "exists"},
		{`{"path": "f.go", "edits": [{"old": "func a", "new": "fn a"}], "moves": [{"from": "nope", "to": "x"}]}`, "not_found"},
		{`{"path": "f.go", "edits": [{"old": "func a", "new": "fn a"}], "moves": [{"from": "g", "to": "/ro/g"}]}`, "read_only"},
		{`{"path": "f.go", "edits": [{"old": "", "new": "x"}]}`, "invalid"},
		{`{"path": "/ro/ro", "edits": [{"old": "ro", "new": "rw"}]}`, "read_only"},
		{`{"path": "bin", "edits": [{"old": "x", "new": "y"}]}`, "binary"},
		{`{"edits": [{"old": "x", "new": "y"}]}`, "invalid"},
		{`{"path": "f.go"}`, "invalid"},
		{`{"moves": [{"from": "g", "to": "g/inside"}]}`, "not_found"},
		{`{"moves": [{"from": "/work", "to": "/work2"}]}`, "invalid"},
		{`{"moves": [{"from": "g", "to": "h"}, {"from": "g", "to": "i"}]}`, "not_found"},
		{`{"moves": [{"from": "g", "to": "h"}, {"from": "f.go", "to": "h"}]}`, "exists"},
		{`{"moves": [{"from": "g", "to": ""}]}`, "invalid"},
	}
	before := testtree.List(t, e.root)
	for _, c := range refusals {
		err := e.call(t, "fs.edit", c.args, nil)
		if code(err) != c.reason {
			t.Errorf("fs.edit %s: %v; want %q", c.args, err, c.reason)
		}
	}
	if after := testtree.List(t, e.root); !slices.Equal(after, before) {
		t.Fatalf("a refused edit changed the tree")
	}
	// Edits in order, through a symlink, then moves that chain.
	var r EditResult
	err := e.call(t, "fs.edit", `{"path": "link", "edits": [{"old": "func a", "new": "func z"}, {"old": "func z() {}\n", "new": ""}],
		"moves": [{"from": "g", "to": "h/g"}, {"from": "h/g", "to": "i"}, {"from": "f.go", "to": "sub/f.go"}]}`, &r)
	must(t, err)
	if r.Absolute != "/work/f.go" || r.Replacements != 2 || len(r.Moves) != 3 ||
		r.Moves[0] != (MoveResult{"/work/g", "/work/h/g"}) || r.Moves[2].Destination != "/work/sub/f.go" {
		t.Fatalf("fs.edit = %+v", r)
	}
	if got := read("w/sub/f.go"); got != "func b() {}\n// b\n" {
		t.Fatalf("edited file = %q", got)
	}
	if read("w/i") != "g\n" {
		t.Fatalf("chained move lost g")
	}
	// A move of the symlink itself.
	must(t, e.call(t, "fs.edit", `{"moves": [{"from": "link", "to": "link2"}]}`, &r))
	if l, err := os.Readlink(e.work + "/link2"); err != nil || l != "f.go" {
		t.Fatalf("link moved as %q, %v", l, err)
	}
}

// workEnv is a session whose only mount, /work, is the host directory dir, with the
// path map's owner o (nil: the controller's own).
func workEnv(t testing.TB, dir string, o *pathmap.Owner) *env {
	t.Helper()
	m, err := pathmap.New(pathmap.Config{Dir: dir, Mounts: []pathmap.Mount{{Sandbox: "/work", Host: dir}}, Owner: o})
	must(t, err)
	t.Cleanup(func() { m.Close() })
	return &env{root: dir, work: dir, m: m, s: New(m, Options{})}
}

// A write on a full file system (a real 1 MiB tmpfs) answers no_space naming the sandbox
// path, leaves the old content and no temporary file.
func TestWriteOnAFullDiskIsNoSpace(t *testing.T) {
	testneed.Root(t) // to mount a tmpfs
	dir, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	err = unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,mode=0755")
	if err != nil {
		testneed.Missing(t, "mount -t tmpfs", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	testtree.Build(t, dir, "file old old content\n")
	f, err := os.Create(dir + "/fill")
	must(t, err)
	for err == nil {
		_, err = f.Write(make([]byte, 64<<10))
	}
	f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the tmpfs: %v", err)
	}
	e := workEnv(t, dir, nil)
	before := testtree.List(t, dir)
	big := strings.Repeat("new content\n", 20000)
	for _, r := range []struct{ typ, args, path string }{
		{"fs.write", `{"path": "old", "content": "` + big[:len(big)-1] + `"}`, "/work/old"},
		{"fs.write", `{"path": "new/dir/file", "content": "` + big[:len(big)-1] + `"}`, "/work/new/dir/file"},
		{"fs.edit", `{"path": "old", "edits": [{"old": "old", "new": "` + big[:len(big)-1] + `"}]}`, "/work/old"},
	} {
		r.args = strings.ReplaceAll(r.args, "\n", `\n`)
		err := e.call(t, r.typ, r.args, nil)
		info := Describe(err)
		if info.Code != "no_space" || !strings.Contains(info.Message, strconv.Quote(r.path)) || !strings.Contains(info.Message, "disk full") {
			t.Errorf("%s %s on a full disk: %+v; want code no_space naming %q and a full disk", r.typ, r.path, info, r.path)
		}
		if strings.Contains(info.Message, dir) {
			t.Errorf("%s: message %q names a host path", r.typ, info.Message)
		}
	}
	if after := testtree.List(t, dir); !slices.Equal(after, before) {
		t.Fatalf("a failed write changed the tree")
	}
	if s := strings.Join(testtree.List(t, dir), "\n"); strings.Contains(s, ".kennel-tmp-") {
		t.Fatalf("temporary file left:\n%s", s)
	}
}

// With an owner in the path map, the files and directories fs.write and fs.edit create
// belong to it (as the files a kernel running as that uid writes itself).
func TestWriteGivesWhatItCreatesToTheOwner(t *testing.T) {
	testneed.Root(t) // to give files to another uid
	dir, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	testtree.Build(t, dir, "file g g\n")
	e := workEnv(t, dir, &pathmap.Owner{UID: 65534, GID: 65534})
	must(t, e.call(t, "fs.write", `{"path": "new/dir/file", "content": "x"}`, nil))
	must(t, e.call(t, "fs.edit", `{"moves": [{"from": "g", "to": "made/g"}]}`, nil))
	for p, want := range map[string]uint32{"new": 65534, "new/dir": 65534, "new/dir/file": 65534, "made": 65534, "made/g": 0, ".": 0} {
		var st unix.Stat_t
		must(t, unix.Lstat(dir+"/"+p, &st))
		if st.Uid != want || st.Gid != want {
			t.Errorf("%s is owned by %d:%d; want %d:%d", p, st.Uid, st.Gid, want, want)
		}
	}
}
