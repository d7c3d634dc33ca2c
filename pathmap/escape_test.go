package pathmap

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kennel-dev/kennel/fshost/fsroot"
	"github.com/kennel-dev/kennel/internal/testtree"
)

const sentinel = "SENTINEL-OUTSIDE"

// escapeFixture is a real tree with two mounts and a directory outside both that holds a
// sentinel file; the mounts are full of symlinks that try to reach it.
type escapeFixture struct {
	root, a, c, out string
	m               *Map
}

func newEscapeFixture(t *testing.T) *escapeFixture {
	t.Helper()
	root := tempDir(t)
	f := &escapeFixture{root: root, a: root + "/a", c: root + "/c", out: root + "/outside"}
	testtree.Build(t, root,
		"file outside/secret "+sentinel,
		"dir outside/sub",
		"file a/d/f inside",
		"file c/x in c",
		"symlink a/abs $ROOT/outside",                 // absolute symlink out
		"symlink a/rel ../outside",                    // relative symlink climbing out
		"symlink a/d/deeprel ../../../../../../../..", // climbing far past the root
		"symlink a/chain1 chain2",                     // chain of links ending outside
		"symlink a/chain2 d/chain3",
		"symlink a/d/chain3 ../../outside/secret",
		"symlink a/okchain1 okchain2", // chain of links staying inside
		"symlink a/okchain2 d/f",
		"symlink a/toc $ROOT/c",              // into another mount: allowed
		"symlink a/tocrel ../c/x",            // relative, into another mount: allowed
		"symlink a/dd $ROOT/outside/sub",     // ".." after a link out
		"symlink a/dangle $ROOT/outside/new", // dangling, pointing out
		"symlink a/dangleout2 ../outside/new2",
		"symlink a/danglein d/new", // dangling, pointing in: a write creates d/new
		"symlink a/loop1 loop2",
		"symlink a/loop2 loop1",
		"symlink a/self self/x",
		"symlink a/magic /proc/self/root$ROOT/outside/secret",
		"symlink a/procfd /proc/self/cwd",
		"symlink a/rootlink /",
		"hardlink a/hard outside/secret",
	)
	f.m = newMap(t, Config{Dir: f.a, Mounts: []Mount{
		{Sandbox: "/work", Host: f.a},
		{Sandbox: "/other", Host: f.c},
	}})
	return f
}

func TestEscapeSuite(t *testing.T) {
	f := newEscapeFixture(t)
	before := testtree.List(t, f.out)
	cases := []struct {
		name, path, reason string
	}{
		{"absolute symlink out", "abs/secret", "outside"},
		{"absolute symlink out, itself", "abs", "outside"},
		{"relative symlink climbing out", "rel/secret", "outside"},
		{"climbing far past the root", "d/deeprel" + f.out + "/secret", "outside"},
		{"chain of links out", "chain1", "outside"},
		{"dotdot after a link out", "dd/../secret", "outside"},
		{"dotdot after a link out, twice", "dd/../../outside/secret", "outside"},
		{"dangling link out", "dangle", "outside"},
		{"dangling relative link out", "dangleout2", "outside"},
		{"loop", "loop1", "loop"},
		{"self loop", "self", "loop"},
		{"magic link via /proc/self/root", "magic", "outside"},
		{"magic link /proc/self/cwd", "procfd", "outside"},
		{"link to /", "rootlink/etc/passwd", "outside"},
		{"plain dotdot", "../outside/secret", "outside"},
		{"absolute host path", f.out + "/secret", "outside"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := f.m.Resolve("/work", c.path)
			if reason(t, err) != c.reason {
				t.Fatalf("Resolve(%q): %v; want %s", c.path, err, c.reason)
			}
			if c.reason == "outside" && (!errors.Is(err, ErrOutside) || err.(*FsError).Version != Version) {
				t.Fatalf("Resolve(%q): %#v is not a versioned outside refusal", c.path, err)
			}
			if _, err := f.m.ResolveEntry("/work", c.path+"/x"); err == nil {
				t.Fatalf("ResolveEntry(%q/x) accepted", c.path)
			}
			if file, _, err := f.m.open("/work", c.path); err == nil {
				file.Close()
				t.Fatalf("Open(%q) succeeded", c.path)
			}
		})
	}
	// Writes and renames through the same paths are refused before anything happens.
	for _, p := range []string{"dangle", "dangleout2", "abs/new", "rel/new", "dd/../new", "chain1", "magic"} {
		if _, err := f.m.Resolve("/work", p); err == nil {
			t.Errorf("write target %q resolved", p)
		}
		if _, err := f.m.ResolveEntry("/work", p+"/new"); err == nil {
			t.Errorf("rename target %q/new resolved", p)
		}
	}
	if after := testtree.List(t, f.out); !slices.Equal(after, before) {
		t.Fatalf("outside changed:\n%q\nwas:\n%q", after, before)
	}
}

func TestEscapeAllowedLinks(t *testing.T) {
	f := newEscapeFixture(t)
	cases := []struct{ path, sb, content string }{
		{"toc/x", "/other/x", "in c"},       // a link into another mount
		{"tocrel", "/other/x", "in c"},      // relative, into another mount
		{"okchain1", "/work/d/f", "inside"}, // a chain that stays inside
	}
	for _, c := range cases {
		file, tg, err := f.m.open("/work", c.path)
		if err != nil {
			t.Fatalf("Open(%q): %v", c.path, err)
		}
		b, _ := io.ReadAll(file)
		file.Close()
		if string(b) != c.content || tg.Sandbox() != c.sb {
			t.Errorf("Open(%q) read %q at %q; want %q at %q", c.path, b, tg.Sandbox(), c.content, c.sb)
		}
	}
	// A dangling link pointing inside is written through: the file appears where it points.
	tg, err := f.m.Resolve("/work", "danglein")
	if err != nil || tg.Exists() || tg.Sandbox() != "/work/d/new" {
		t.Fatalf("Resolve(danglein) = %q exists %v, %v", tg.Sandbox(), tg.Exists(), err)
	}
	if _, err := tg.WriteFile([]byte("made")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(f.a + "/d/new"); err != nil || string(b) != "made" {
		t.Fatalf("d/new = %q, %v", b, err)
	}
}

// A hard link names an inode, not a path: it is served like any file (see the package doc).
func TestHardLinkIsNotAnEscape(t *testing.T) {
	f := newEscapeFixture(t)
	file, _, err := f.m.open("/work", "hard")
	if err != nil {
		t.Fatalf("Open(hard): %v", err)
	}
	defer file.Close()
	if b, _ := io.ReadAll(file); string(b) != sentinel {
		t.Fatalf("hard link read %q", b)
	}
}

// A mount of /proc/self: its magic links are read as text and refused when the text leads
// outside every mount; they are never crossed by an open.
func TestMagicLinksInAMount(t *testing.T) {
	f := newEscapeFixture(t)
	m := newMap(t, Config{Dir: f.a, Mounts: []Mount{
		{Sandbox: "/work", Host: f.a},
		{Sandbox: "/p", Host: "/proc/self"},
	}})
	for _, p := range []string{"/p/root" + f.out + "/secret", "/p/cwd", "/p/root", "/p/exe"} {
		if _, err := m.Resolve("/work", p); reason(t, err) != "outside" {
			t.Errorf("Resolve(%q): %v; want outside", p, err)
		}
	}
	// The mechanism itself: an open beneath a mount root never crosses a magic link.
	mm, _ := m.sandboxMount([]string{"p"})
	for _, rel := range []string{"root", "root/etc/passwd", "cwd/x"} {
		if fd, err := openat2(mm.root, rel, unix.O_RDONLY, 0, resolveStrict); err == nil {
			closeFd(fd)
			t.Errorf("openat2(/proc/self, %q) crossed a magic link", rel)
		}
	}
}

// swapTree is the tree of the swap races: a/dir is swapped with a/evil, a symlink to
// outside.
var swapTree = []string{
	"file a/dir/file INSIDE",
	"file outside/file " + sentinel,
	"symlink a/evil $ROOT/outside",
}

// The race: a directory on the path is swapped with a symlink pointing outside, in a
// tight loop, while another goroutine opens and reads through it 10,000 times. No read
// may ever return the sentinel.
func TestSwapRace(t *testing.T) {
	root := tempDir(t)
	testtree.Build(t, root, swapTree...)
	m := newMap(t, Config{Dir: root + "/a", Mounts: []Mount{{Sandbox: "/work", Host: root + "/a"}}})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var swaps atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if err := unix.Renameat2(unix.AT_FDCWD, root+"/a/dir", unix.AT_FDCWD, root+"/a/evil", unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("exchange: %v", err)
				return
			}
			swaps.Add(1)
		}
	}()
	var ok, refused int
	buf := make([]byte, 64)
	for i := 0; i < 10000; i++ {
		var file *os.File
		var err error
		if i%2 == 0 {
			file, _, err = m.open("/work", "dir/file")
		} else {
			var tg Target
			if tg, err = m.Resolve("/work/dir", "file"); err == nil {
				file, err = tg.Open()
			}
		}
		if err != nil {
			if r := reason(t, err); r != "outside" && r != "changed" && r != "not_found" {
				t.Fatalf("read %d: unexpected %v", i, err)
			}
			refused++
			continue
		}
		n, _ := file.Read(buf)
		file.Close()
		if got := string(buf[:n]); got != "INSIDE" {
			cancel()
			wg.Wait()
			t.Fatalf("read %d returned %q", i, got)
		}
		ok++
	}
	// Walk and read entries through the swapping directory too.
	for i := 0; i < 200; i++ {
		tg, err := m.Resolve("/work", "dir")
		if err != nil {
			continue
		}
		_ = m.walkTarget(ctx, tg, nil, func(e fsroot.Entry) error {
			data, _, err := m.ReadFile(ctx, e, nil, 1<<20)
			if err == nil && strings.Contains(string(data), sentinel) {
				t.Errorf("walk read the sentinel through %s", e.Path)
			}
			return nil
		})
	}
	cancel()
	wg.Wait()
	t.Logf("%d reads, %d refused, %d swaps", ok, refused, swaps.Load())
	if swaps.Load() == 0 || ok == 0 {
		t.Fatalf("the race did not run: %d swaps, %d reads", swaps.Load(), ok)
	}
	if b, _ := os.ReadFile(root + "/outside/file"); string(b) != sentinel {
		t.Fatalf("outside file changed: %q", b)
	}
}

// Writes race the same swap: nothing may ever be created or changed outside.
func TestSwapRaceWrite(t *testing.T) {
	root := tempDir(t)
	testtree.Build(t, root, swapTree...)
	m := newMap(t, Config{Dir: root + "/a", Mounts: []Mount{{Sandbox: "/work", Host: root + "/a"}}})
	before := testtree.List(t, root+"/outside")
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			unix.Renameat2(unix.AT_FDCWD, root+"/a/dir", unix.AT_FDCWD, root+"/a/evil", unix.RENAME_EXCHANGE)
		}
	}()
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; i < 2000 && time.Now().Before(deadline); i++ {
		if tg, err := m.Resolve("/work", "dir/file"); err == nil {
			tg.WriteFile([]byte("W"))
		}
		if tg, err := m.Resolve("/work", "dir/sub/new"); err == nil {
			tg.WriteFile([]byte("W"))
		}
		from, err1 := m.ResolveEntry("/work", "dir/file")
		to, err2 := m.ResolveEntry("/work", "dir/moved")
		if err1 == nil && err2 == nil {
			if Rename(from, to) == nil {
				if back, err := m.ResolveEntry("/work", "dir/file"); err == nil {
					if src, err := m.ResolveEntry("/work", "dir/moved"); err == nil {
						Rename(src, back)
					}
				}
			}
		}
	}
	close(done)
	wg.Wait()
	if after := testtree.List(t, root+"/outside"); !slices.Equal(after, before) {
		t.Fatalf("outside changed:\n%q\nwas:\n%q", after, before)
	}
}

// Resolutions, refusals, opens, writes and walks leave no descriptor open.
func TestNoDescriptorLeak(t *testing.T) {
	f := newEscapeFixture(t)
	count := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		must(t, err)
		return len(ents)
	}
	paths := []string{"abs/secret", "rel/secret", "chain1", "dd/../secret", "loop1", "self", "magic",
		"toc/x", "tocrel", "okchain1", "d/f", "d/../d/f", "nope/x", "d/f/x", "d/new", "../x"}
	run := func() {
		for _, p := range paths {
			for _, cwd := range []string{"/work", "/work/d", "/work/toc", "/other/../work/d"} {
				if tg, err := f.m.Resolve(cwd, p); err == nil {
					if file, err := tg.Open(); err == nil {
						file.Close()
					}
				}
				f.m.ResolveEntry(cwd, p)
			}
		}
		tg, _ := f.m.Resolve("/work", "d")
		f.m.walkTarget(context.Background(), tg, nil, func(e fsroot.Entry) error {
			f.m.ReadFile(context.Background(), e, nil, 100)
			return nil
		})
		tg, _ = f.m.Resolve("/work", "d/x/y/z")
		tg.WriteFile([]byte("x"))
	}
	run()
	before := count()
	for range 20 {
		run()
	}
	if after := count(); after != before {
		t.Fatalf("%d descriptors open, %d before", after, before)
	}
}
