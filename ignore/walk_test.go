package ignore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testtree"
)

// gitCases are trees whose listing must be exactly what git lists.
var gitCases = []struct {
	name  string
	specs []string
}{
	{"plain", []string{"file a.txt", "file b/c.txt", "dir empty/"}},
	{"glob", []string{"file .gitignore *.log", "file a.log", "file a.txt", "file d/b.log", "file d/e/c.log"}},
	{"negation", []string{"file .gitignore *.log\n!keep.log", "file a.log", "file keep.log", "file d/keep.log", "file d/x.log"}},
	{"negation order", []string{"file .gitignore !keep.log\n*.log", "file keep.log", "file a.log"}},
	{"nested", []string{
		"file .gitignore *.txt\nsecret",
		"file a.txt", "file b.md",
		"file sub/.gitignore !keep.txt\n*.md\n/anch",
		"file sub/keep.txt", "file sub/other.txt", "file sub/x.md", "file sub/anch", "file sub/deep/anch",
		"file sub/deep/keep.txt", "file sub/secret", "file other/keep.txt",
	}},
	{"nested path pattern", []string{
		"file sub/.gitignore x/y\n**/z",
		"file sub/x/y", "file sub/x/w", "file x/y", "file sub/q/z", "file sub/z", "file z",
	}},
	{"deeper overrides", []string{
		"file .gitignore !*.o", "file a/.gitignore *.o", "file a/b/.gitignore !keep.o",
		"file x.o", "file a/x.o", "file a/b/x.o", "file a/b/keep.o", "file a/b/c/keep.o",
	}},
	{"dir only", []string{
		"file .gitignore build/", "file build/out.o", "file build/sub/x", "file src/build", "file src/build2/x",
		"file src/x/build/y",
	}},
	{"dir only vs symlink", []string{
		"file .gitignore link/\nreal/", "dir target/", "file target/f", "symlink link target", "file real/f",
	}},
	{"anchored", []string{
		"file .gitignore /x\n/d/y\nz/", "file x", "file sub/x", "file d/y", "file sub/d/y", "file z/f", "file sub/z/f",
	}},
	{"double star", []string{
		"file .gitignore **/foo\na/**/b\nlogs/**\n!logs/keep\nq/**/\n/**/top",
		"file foo", "file x/foo", "file x/y/foo/z", "file a/b", "file a/x/b", "file a/x/y/b",
		"file ab", "file logs/keep", "file logs/drop", "file logs/d/keep", "file q/f", "file q/d/f", "file top",
		"file s/top",
	}},
	{"double star backtrack", []string{
		"file .gitignore a/**/b\n!a/b/\n**/c/d\n!c/", "file a/b/b", "file a/b/c", "file a/x/b", "file c/c/d", "file c/x",
	}},
	{"double star after a literal prefix", []string{
		// git compares "a" literally, then matches "**/*" as a glob of
		// its own, so the "**" is leading: "a" itself is ignored.
		"file .gitignore /a**/*\nb**c", "file a", "file ab", "file ac/x", "file b", "file bxc", "file bx/c",
	}},
	{"star in component", []string{
		"file .gitignore a**b\nc/**d", "file ab", "file axxb", "file a/b", "file c/d", "file c/xd", "file c/x/d",
	}},
	{"escapes", []string{
		"file .gitignore \\#hash\n\\!bang\na\\*b\n\\[x]\nq\\?",
		"file #hash", "file !bang", "file a*b", "file axb", "file [x]", "file x", "file q?", "file qz",
	}},
	{"classes", []string{
		"file .gitignore [!a]1\n[[:digit:]]2\n[]]3\n[a-c]4\n[a-]5\nz[^x]",
		"file a1", "file b1", "file !1", "file 72", "file x2", "file ]3", "file b4", "file d4", "file -5", "file a5",
		"file b5", "file zx", "file zy",
	}},
	{"question mark is a byte", []string{"file .gitignore ?\n", "file é", "file e"}},
	{"trailing spaces", []string{
		"file .gitignore trail   \nsp\\ \ntwo\\  \nbs\\\\ ",
		"file trail", `file "trail   "`, `file "sp "`, "file sp", `file "two "`, "file two", "file bs\\", "file bs",
	}},
	{"comments and blanks", []string{
		"file .gitignore # a comment\n\n   \n#x\n \\#y\n #z",
		"file #x", `file "# a comment"`, "file #y", `file " #y"`, `file " #z"`, "file a",
	}},
	{"crlf and bom", []string{"file .gitignore \xef\xbb\xbfa.txt\r\nb.txt \r\nc.txt", "file a.txt", "file b.txt", "file c.txt", "file d.txt"}},
	{"parent excluded", []string{
		"file .gitignore dir/\n!dir/keep.txt\nother\n!other/keep.txt",
		"file dir/keep.txt", "file dir/x", "file other/keep.txt", "file other/x",
	}},
	{"parent contents excluded", []string{
		"file .gitignore dir/*\n!dir/keep.txt\n!dir/sub/keep.txt",
		"file dir/keep.txt", "file dir/x", "file dir/sub/keep.txt",
	}},
	{"negated inside excluded dir by nested file", []string{
		"file .gitignore dir/", "file dir/.gitignore !keep", "file dir/keep",
	}},
	{"all but txt", []string{
		"file .gitignore *\n!*/\n!*.txt", "file a.txt", "file a.py", "file d/b.txt", "file d/x.py", "file d/e/c.txt",
	}},
	{"ignore self", []string{"file .gitignore .gitignore\nsub", "file a", "file sub/.gitignore !x", "file sub/x"}},
	{"dot git skipped", []string{"file sub/.git/config", "file sub/x", "file y/.git", "file z"}},
	{"symlinks listed", []string{
		"file .gitignore ignored-link", "dir d/", "file d/f", "symlink l d", "symlink dangling nowhere",
		"symlink ignored-link d", "symlink up ../..",
	}},
	{"symlinked gitignore not followed", []string{
		"file rules x", "symlink .gitignore rules", "file x", "file y",
	}},
	{"slash forms", []string{
		"file .gitignore a//b\n/\n!\nd\\/e\n//f", "file a/b", "file d/e", "file f",
	}},
}

// walkers are the two walks, over a local directory: Walk itself and
// WalkFS over os.DirFS. Every behaviour test runs against both.
var walkers = []struct {
	name string
	walk func(ctx context.Context, dir string, fn func(rel string, d fs.DirEntry) error) error
}{
	{"Walk", Walk},
	{"WalkFS", func(ctx context.Context, dir string, fn func(rel string, d fs.DirEntry) error) error {
		return WalkFS(ctx, os.DirFS(dir), ".", fn)
	}},
}

func TestWalkMatchesGit(t *testing.T) {
	git := testneed.Tool(t, "git")
	env := gitEnv(t)
	for _, tc := range gitCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			testtree.Build(t, dir, tc.specs...)
			want := gitFiles(t, git, env, dir)
			if got := walkFiles(t, dir); !slices.Equal(got, want) {
				t.Errorf("Walk files\n got %q\nwant %q (git ls-files)", got, want)
			}
			if got := walkFSFiles(t, dir); !slices.Equal(got, want) {
				t.Errorf("WalkFS files\n got %q\nwant %q (git ls-files)", got, want)
			}
			if got := matcherFiles(t, dir); !slices.Equal(got, want) {
				t.Errorf("Matcher files\n got %q\nwant %q (git ls-files)", got, want)
			}
		})
	}
}

// TestWalkIgnoresGitExcludes: .git/info/exclude and global excludes never
// apply, so a file only they ignore is listed.
func TestWalkIgnoresGitExcludes(t *testing.T) {
	dir := t.TempDir()
	testtree.Build(t, dir, "file .git/info/exclude a.txt", "file a.txt", "file b.txt")
	home := t.TempDir()
	testtree.Build(t, home, "file git/ignore b.txt")
	t.Setenv("XDG_CONFIG_HOME", home)
	if got, want := walkFiles(t, dir), []string{"a.txt", "b.txt"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	m := New(dir)
	if m.Ignored("a.txt", false) || m.Ignored("b.txt", false) {
		t.Error("Matcher applied .git/info/exclude or global excludes")
	}
}

func TestWalkSymlinkNotFollowed(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	testtree.Build(t, outside, "file secret")
	testtree.Build(t, dir, "symlink out "+outside, "symlink loop loop", "file a")
	for _, w := range walkers {
		got := map[string]fs.FileMode{}
		err := w.walk(context.Background(), dir, func(rel string, d fs.DirEntry) error {
			got[rel] = d.Type()
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		want := map[string]fs.FileMode{"a": 0, "loop": fs.ModeSymlink, "out": fs.ModeSymlink}
		if len(got) != len(want) {
			t.Fatalf("%s: got %v, want %v", w.name, got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s: type %v, want %v", w.name, k, got[k], v)
			}
		}
	}
}

func TestWalkDotGitNeverEntered(t *testing.T) {
	dir := t.TempDir()
	testtree.Build(t, dir, "file .git/HEAD", "file .git/objects/x", "file a/.git/config", "file a/b", "file .gitx/y")
	for _, w := range walkers {
		var got []string
		err := w.walk(context.Background(), dir, func(rel string, d fs.DirEntry) error {
			got = append(got, rel)
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		if want := []string{".gitx", ".gitx/y", "a", "a/b"}; !slices.Equal(got, want) {
			t.Errorf("%s: got %q, want %q", w.name, got, want)
		}
	}
	m := New(dir)
	for _, p := range []string{".git", ".git/HEAD", "a/.git/config"} {
		if !m.Ignored(p, false) {
			t.Errorf("Ignored(%q) = false, want true", p)
		}
	}
}

func TestWalkOrderAndSkip(t *testing.T) {
	dir := t.TempDir()
	testtree.Build(t, dir, "file a/1", "file a/2", "file a.txt", "file b/x/1", "file b/y", "file c/1", "file c/2", "file c/3", "file d")
	for _, w := range walkers {
		t.Run(w.name, func(t *testing.T) { testOrderAndSkip(t, dir, w.walk) })
	}
}

func testOrderAndSkip(t *testing.T, dir string, walk func(context.Context, string, func(string, fs.DirEntry) error) error) {
	collect := func(fn func(rel string, d fs.DirEntry) error) ([]string, error) {
		var got []string
		err := walk(context.Background(), dir, func(rel string, d fs.DirEntry) error {
			got = append(got, rel)
			return fn(rel, d)
		})
		return got, err
	}
	got, err := collect(func(string, fs.DirEntry) error { return nil })
	var want []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if rel, _ := filepath.Rel(dir, p); rel != "." {
			want = append(want, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("got %q, %v; want WalkDir's %q", got, err, want)
	}

	got, err = collect(func(rel string, d fs.DirEntry) error {
		switch rel {
		case "b":
			return fs.SkipDir // a directory: not entered
		case "c/1":
			return fs.SkipDir // a file: rest of c skipped
		}
		return nil
	})
	if want := []string{"a", "a/1", "a/2", "a.txt", "b", "c", "c/1", "d"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("SkipDir: got %q, %v; want %q", got, err, want)
	}

	got, err = collect(func(rel string, d fs.DirEntry) error {
		if rel == "a/2" {
			return fs.SkipAll
		}
		return nil
	})
	if want := []string{"a", "a/1", "a/2"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("SkipAll: got %q, %v; want %q", got, err, want)
	}

	boom := errors.New("boom")
	got, err = collect(func(rel string, d fs.DirEntry) error {
		if rel == "b/x" {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || got[len(got)-1] != "b/x" {
		t.Errorf("fn error: got %q, %v; want a stop at b/x with boom", got, err)
	}
}

func TestWalkContextCancel(t *testing.T) {
	dir := t.TempDir()
	testtree.Build(t, dir, "file a/1", "file b/1", "file c/1")
	for _, w := range walkers {
		ctx, cancel := context.WithCancel(context.Background())
		n := 0
		err := w.walk(ctx, dir, func(rel string, d fs.DirEntry) error {
			n++
			if rel == "a" {
				cancel()
			}
			return nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: err = %v, want context.Canceled", w.name, err)
		}
		if n != 1 {
			t.Errorf("%s: fn called %d times after cancel at the first entry, want 1", w.name, n)
		}
	}
}

func TestWalkErrors(t *testing.T) {
	dir := t.TempDir()
	testtree.Build(t, dir, "file f")
	err := Walk(context.Background(), filepath.Join(dir, "missing"), func(string, fs.DirEntry) error { return nil })
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing root: %v, want fs.ErrNotExist", err)
	}
	called := false
	err = Walk(context.Background(), filepath.Join(dir, "f"), func(string, fs.DirEntry) error { called = true; return nil })
	if err == nil || called {
		t.Errorf("root is a file: err %v, called %v; want an error and no call", err, called)
	}

	fsys := os.DirFS(dir)
	err = WalkFS(context.Background(), fsys, "missing", func(string, fs.DirEntry) error { called = true; return nil })
	if !errors.Is(err, fs.ErrNotExist) || called {
		t.Errorf("WalkFS missing root: %v, called %v; want fs.ErrNotExist and no call", err, called)
	}
	err = WalkFS(context.Background(), fsys, "f", func(string, fs.DirEntry) error { called = true; return nil })
	if err == nil || called {
		t.Errorf("WalkFS root is a file: err %v, called %v; want an error and no call", err, called)
	}
	for _, root := range []string{"", "/", "../x", "a/../f", "./f", "f/"} {
		err = WalkFS(context.Background(), fsys, root, func(string, fs.DirEntry) error { called = true; return nil })
		if !errors.Is(err, fs.ErrInvalid) || called {
			t.Errorf("WalkFS root %q: %v, called %v; want fs.ErrInvalid and no call", root, err, called)
		}
	}
}

func TestWalkTooDeep(t *testing.T) {
	dir := t.TempDir()
	// MaxDepth+1 nested directories, built with relative mkdirs to stay
	// under PATH_MAX.
	p := dir
	for i := 0; i <= MaxDepth; i += 100 {
		n := min(100, MaxDepth+1-i)
		p = filepath.Join(p, strings.Repeat("d/", n))
		mustMkdir(t, p)
	}
	for _, w := range walkers {
		err := w.walk(context.Background(), dir, func(string, fs.DirEntry) error { return nil })
		if !errors.Is(err, ErrTooDeep) {
			t.Fatalf("%s: err = %v, want ErrTooDeep", w.name, err)
		}
	}
}

// TestWalkUnreadableGitignore checks a .gitignore the walker may not read fails the walk
// with fs.ErrPermission. As root, the walk runs on an OS thread that has dropped the
// capabilities that let root read any file (capabilities are per thread).
func TestWalkUnreadableGitignore(t *testing.T) {
	dir := t.TempDir()
	testtree.Build(t, dir, "file .gitignore x", "file x")
	if err := os.Chmod(filepath.Join(dir, ".gitignore"), 0); err != nil {
		t.Fatal(err)
	}
	for _, w := range walkers {
		done := make(chan error, 1)
		go func() {
			if os.Geteuid() == 0 {
				// The thread stays locked: it ends with this goroutine, capabilities dropped.
				runtime.LockOSThread()
				if err := dropFileCapabilities(); err != nil {
					done <- fmt.Errorf("drop capabilities: %w", err)
					return
				}
			}
			done <- w.walk(context.Background(), dir, func(string, fs.DirEntry) error { return nil })
		}()
		if err := <-done; !errors.Is(err, fs.ErrPermission) {
			t.Errorf("%s: err = %v, want fs.ErrPermission", w.name, err)
		}
	}
}

// dropFileCapabilities removes CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the calling
// thread's effective set.
func dropFileCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[0].Effective &^= 1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_DAC_READ_SEARCH
	return unix.Capset(&hdr, &data[0])
}

func TestWalkFIFOGitignore(t *testing.T) {
	dir := t.TempDir()
	testtree.Build(t, dir, "file x")
	if err := mkfifo(filepath.Join(dir, ".gitignore")); err != nil {
		testneed.Missing(t, "mkfifo", err)
	}
	for _, w := range walkers {
		type result struct {
			files []string
			err   error
		}
		done := make(chan result, 1)
		go func() {
			var r result
			r.err = w.walk(context.Background(), dir, func(rel string, d fs.DirEntry) error {
				r.files = append(r.files, rel)
				return nil
			})
			done <- r
		}()
		select {
		case r := <-done:
			if want := []string{".gitignore", "x"}; r.err != nil || !slices.Equal(r.files, want) {
				t.Errorf("%s: got %q, %v; want %q", w.name, r.files, r.err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s blocked on a FIFO .gitignore", w.name)
		}
	}
}

func TestMatcherIgnored(t *testing.T) {
	dir := t.TempDir()
	testtree.Build(t, dir,
		"file .gitignore build/\n*.log\n!keep.log\nd/*\n!d/in",
		"file sub/.gitignore !x.log", "dir build/", "dir d/in/", "symlink lnk build")
	m := New(dir)
	for _, tc := range []struct {
		rel   string
		isDir bool
		want  bool
	}{
		{"build", true, true},
		{"build", false, false}, // a file named build: "build/" is for directories
		{"build/x.c", false, true},
		{"sub/build/x.c", false, true},
		{"a.log", false, true},
		{"keep.log", false, false},
		{"sub/x.log", false, false},
		{"sub/y.log", false, true},
		{"d/in", true, false},
		{"d/in/x", false, false},
		{"d/out", false, true},
		{"d/out/keep.log", false, true},
		{"lnk", false, false},
		{"", true, false},
		{".", true, false},
		{"../x.log", false, false},
		{"/a.log", false, false},
		{"./a.log", false, true},
		{"sub//y.log", false, true},
		{".git", true, true},
		{"x/.git/y", false, true},
	} {
		if got := m.Ignored(tc.rel, tc.isDir); got != tc.want {
			t.Errorf("Ignored(%q, %v) = %v, want %v", tc.rel, tc.isDir, got, tc.want)
		}
	}
}
