package workspaces

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
	"pgregory.net/rapid"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testtree"
)

// removeHelperEnv makes the test binary remove the tree its value names with removeTree
// and exit (see TestMain): the removal as another user.
const removeHelperEnv = "KENNEL_WORKSPACES_TEST_REMOVE"

func TestMain(m *testing.M) {
	if p, ok := os.LookupEnv(removeHelperEnv); ok {
		if err := removeTree(p); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// heldSweeper returns a Sweeper whose removals wait until release is called, and a
// channel that receives the trash directory of each removal as it is held.
func heldSweeper() (s *Sweeper, held chan string, release func()) {
	gate := make(chan struct{})
	held = make(chan string, 16)
	s = &Sweeper{hook: func(trash string) {
		held <- trash
		<-gate
	}}
	return s, held, func() { close(gate) }
}

// TestHandBackSweepsInTheBackground checks that with a Sweeper HandBack returns once the
// record is written and the child's directory is a link, while the removal of the base
// and the copy (moved whole into trash/) is still held back; Wait then waits for it.
func TestHandBackSweepsInTheBackground(t *testing.T) {
	sc := scenario{base: tree(t, "file a 1", "file d/b 1"), parent: tree(t, "file a 1", "file d/b 1"), child: tree(t, "file a 2", "file d/b 1", "file n new")}
	st := stage(t, t.TempDir(), sc)
	s, held, release := heldSweeper()
	out, err := HandBack(context.Background(), st.ws.Path(), HandBackOptions{NoSync: true, Sweeper: s})
	if err != nil {
		t.Fatal(err)
	}
	trash := filepath.Join(st.ws.Dir, trashName)
	if got := <-held; got != trash {
		t.Fatalf("held removal of %s, want %s", got, trash)
	}
	// Returned with the removal held: the record and the link are there, the base and
	// the copy are whole in trash/.
	if _, err := os.Stat(filepath.Join(st.ws.Dir, recordName)); err != nil {
		t.Fatalf("no record: %v", err)
	}
	if target, err := os.Readlink(st.ws.Path()); err != nil || target != st.ws.Parent {
		t.Fatalf("the child's directory is not a link yet: %q %v", target, err)
	}
	if got := readTree(t, filepath.Join(trash, baseName)); !maps.Equal(got, st.baseDir) {
		t.Fatalf("trash/base holds %v", got)
	}
	if got := readTree(t, filepath.Join(trash, workName)); !maps.Equal(got, st.child) {
		t.Fatalf("trash/work holds %v", got)
	}
	// A Wait that gives up returns its context's error and the removal goes on.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled context: %v", err)
	}
	release()
	if err := s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkHandBack(t, st, out)
}

// TestLeftoverTrashIsSwept checks that trash a process left (it died after moving the
// base and the copy, or half-way through removing them; with read-only directories and a
// symlink out of the tree) is removed by the next Create and the next HandBack under the
// same state directory, with and without a Sweeper, and nothing outside it is touched.
func TestLeftoverTrashIsSwept(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sweep func(t *testing.T, state, other string, s *Sweeper)
	}{
		{"create", func(t *testing.T, state, other string, s *Sweeper) {
			if _, err := Create(context.Background(), other, CreateOptions{State: state, ID: "next", Logger: quiet(), Sweeper: s}); err != nil {
				t.Fatal(err)
			}
		}},
		{"handback", func(t *testing.T, state, other string, s *Sweeper) {
			res := mustCreate(t, other, state, "next")
			if _, err := HandBack(context.Background(), res.Path(), HandBackOptions{NoSync: true, Sweeper: s}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		for _, background := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/background=%v", tc.name, background), func(t *testing.T) {
				dir := t.TempDir()
				outside := filepath.Join(dir, "outside")
				testtree.Build(t, outside, "file keep 1", "dir sub")
				sc := scenario{base: tree(t, "file a 1", "file d/e/b 1"), parent: tree(t, "file a 1", "file d/e/b 1"), child: tree(t, "file a 2", "file d/e/b 1")}
				st := stage(t, dir, sc)
				// Things a removal must not follow, and a directory it may not write.
				os.Symlink(outside, filepath.Join(st.ws.Path(), "out"))
				os.Symlink(filepath.Join(outside, "keep"), filepath.Join(st.ws.Path(), "d", "keep"))
				_, err := HandBack(context.Background(), st.ws.Path(), HandBackOptions{NoSync: true, Step: func(name string) error {
					if name == "link work" {
						return errCut // as if the process died after moving both into trash/
					}
					return nil
				}})
				if !errors.Is(err, errCut) {
					t.Fatalf("cut: %v", err)
				}
				trash := filepath.Join(st.ws.Dir, trashName)
				// Half removed: part of the copy is gone already.
				if err := os.Remove(filepath.Join(trash, workName, "a")); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(filepath.Join(trash, workName, "d", "e"), 0o555); err != nil {
					t.Fatal(err)
				}
				other := filepath.Join(dir, "other")
				testtree.Build(t, other, "file x 1")
				var s *Sweeper
				if background {
					s = &Sweeper{}
				}
				tc.sweep(t, filepath.Join(dir, "state"), other, s)
				if background {
					if err := s.Wait(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := os.Lstat(trash); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("the leftover trash is still there: %v", err)
				}
				if got := readTree(t, outside); !maps.Equal(got, tree(t, "file keep 1", "dir sub")) {
					t.Fatalf("the sweep touched what a link pointed at: %v", got)
				}
				// The cut hand-back itself finishes on its rerun.
				out, err := HandBack(context.Background(), st.ws.Path(), HandBackOptions{NoSync: true})
				if err != nil || !out.Repeat {
					t.Fatalf("rerun: %v", err)
				}
				if target, err := os.Readlink(st.ws.Path()); err != nil || target != st.ws.Parent {
					t.Fatalf("the child's directory is not a link: %q %v", target, err)
				}
			})
		}
	}
}

// TestTrashLockedByAnotherRemoverIsLeftToIt checks a sweep of leftovers skips a trash
// directory another remover holds (the flock), and that the hand-back's own removal,
// which waits for that lock, finds it done.
func TestTrashLockedByAnotherRemoverIsLeftToIt(t *testing.T) {
	trash := filepath.Join(t.TempDir(), trashName)
	testtree.Build(t, trash, "file base/a 1")
	f, err := os.Open(trash)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if err := removeTrashNow(context.Background(), trash, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(trash, "base", "a")); err != nil {
		t.Fatalf("a sweep removed a locked trash: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- removeTrashNow(context.Background(), trash, true) }()
	// The holder finishes its removal, then lets go.
	if err := os.RemoveAll(trash); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := <-done; err != nil {
		t.Fatalf("the waiting remover: %v", err)
	}
}

// TestSweeperReportsErrors checks a removal that fails is reported by one Wait, and the
// trash stays for a later sweep.
func TestSweeperReportsErrors(t *testing.T) {
	testneed.Root(t) // to set a file immutable
	trash := filepath.Join(t.TempDir(), trashName)
	testtree.Build(t, trash, "file base/a 1")
	stuck := filepath.Join(trash, "base", "a")
	if err := setImmutable(stuck, true); err != nil {
		if errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP) {
			testneed.Missing(t, "immutable files (chattr +i) on the temporary directory's file system", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { setImmutable(stuck, false) })
	s := &Sweeper{}
	if err := s.removeTrash(context.Background(), trash, true); err != nil {
		t.Fatal(err)
	}
	err := s.Wait(context.Background())
	if !errors.Is(err, unix.EPERM) || !strings.Contains(err.Error(), stuck) {
		t.Fatalf("Wait: %v, want EPERM naming %s", err, stuck)
	}
	if err := s.Wait(context.Background()); err != nil {
		t.Fatalf("a second Wait: %v, want nil", err)
	}
	if _, err := os.Stat(stuck); err != nil {
		t.Fatalf("the file that could not go: %v", err)
	}
}

// fsImmutableFL is FS_IMMUTABLE_FL of <linux/fs.h>: no unlink, no write.
const fsImmutableFL = 0x10

// setImmutable sets or clears the immutable flag of the file p (FS_IOC_SETFLAGS).
func setImmutable(p string, on bool) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	flags, err := unix.IoctlGetInt(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		return err
	}
	if on {
		flags |= fsImmutableFL
	} else {
		flags &^= fsImmutableFL
	}
	return unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, flags)
}

// TestRemoveTreeAsAnotherUser removes, as uid 65534 (the test binary run as that user),
// a child's copy it owns with read-only and unreadable directories in it: the removal
// makes them writable through their own descriptors, and a symlink to a directory the
// user could change stays a link (what it points at keeps its mode and its files).
func TestRemoveTreeAsAnotherUser(t *testing.T) {
	testneed.Root(t) // to run the test binary as uid 65534
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o755) // t.TempDir's directories are 0700
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "workspaces.test")
	copyFile(t, bin, os.Args[0], 0o755)
	victim := filepath.Join(dir, "victim")
	testtree.Build(t, victim, "file v 1")
	os.Chown(victim, 65534, 65534)
	os.Chmod(victim, 0o555)
	home := filepath.Join(dir, "home") // the user's: it may remove what is in it
	os.Mkdir(home, 0o755)
	os.Chown(home, 65534, 65534)
	copyDir := filepath.Join(home, "copy")
	testtree.Build(t, copyDir, "file a 1", "file ro/b 1", "file ro/deep/c 1", "file locked/d 1", "symlink lnk ../../victim")
	filepath.WalkDir(copyDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			os.Lchown(p, 65534, 65534)
		}
		return nil
	})
	os.Chmod(filepath.Join(copyDir, "ro", "deep"), 0o555)
	os.Chmod(filepath.Join(copyDir, "ro"), 0o555)
	os.Chmod(filepath.Join(copyDir, "locked"), 0o000)
	os.Chmod(copyDir, 0o755)
	asNobody := func() *exec.Cmd {
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), removeHelperEnv+"="+copyDir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		return cmd
	}
	if out, err := asNobody().CombinedOutput(); err != nil {
		t.Fatalf("remove as uid 65534: %v\n%s", err, out)
	}
	if _, err := os.Lstat(copyDir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the copy is still there: %v", err)
	}
	if st, err := os.Stat(victim); err != nil || st.Mode().Perm() != 0o555 {
		t.Fatalf("what the link pointed at changed: %v %v", st.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(victim, "v")); err != nil {
		t.Fatalf("what the link pointed at lost a file: %v", err)
	}
	// The same tree with a directory the user cannot make writable (owned by root)
	// fails with a clear error, and the removal stops there.
	testtree.Build(t, copyDir, "file rootdir/x 1")
	os.Chmod(filepath.Join(copyDir, "rootdir"), 0o555)
	os.Chmod(copyDir, 0o777)
	out, err := asNobody().CombinedOutput()
	if err == nil || !strings.Contains(string(out), "permission denied") {
		t.Fatalf("removing a root-owned read-only directory as uid 65534: %v\n%s", err, out)
	}
}

// copyFile copies the file src to dst with mode.
func copyFile(t *testing.T, dst, src string, mode fs.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRemoveTreeProperties removes generated trees (files, directories, symlinks, some
// pointing out of the tree) with two removers at once, as two processes sweeping one
// trash may: both succeed, the tree is gone, and what the links point at is untouched.
func TestRemoveTreeProperties(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(root, "outside")
	testtree.Build(t, outside, "file keep 1", "file d/keep 2")
	want := readTree(t, outside)
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		p := filepath.Join(root, fmt.Sprint("t", n))
		if err := os.Mkdir(p, 0o755); err != nil {
			rt.Fatalf("%v", err)
		}
		l := genTree(rt, "tree")
		for i := range rapid.IntRange(0, 3).Draw(rt, "links") {
			target := rapid.SampledFrom([]string{outside, filepath.Join(outside, "d"), filepath.Join(outside, "keep")}).Draw(rt, "target")
			put(l, fmt.Sprintf("out%d", i), Entry{Kind: KindSymlink, Content: target})
		}
		writeTree(rt, p, l)
		errs := make(chan error, 2)
		for range 2 {
			go func() { errs <- removeTree(p) }()
		}
		for range 2 {
			if err := <-errs; err != nil {
				rt.Fatalf("remove: %v", err)
			}
		}
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			rt.Fatalf("the tree is still there: %v", err)
		}
		if got := readTree(rt, outside); !maps.Equal(got, want) {
			rt.Fatalf("outside the tree: %v, want %v", got, want)
		}
	})
}

// TestDeferredSweeperLeavesTheRemovalToRemoveTrash checks that HandBack with a Sweeper
// in Defer mode removes nothing: it returns with the base and the copy whole in trash/
// and names that directory in Deferred (once); RemoveTrash then removes it, and a second
// RemoveTrash of the gone directory is no error.
func TestDeferredSweeperLeavesTheRemovalToRemoveTrash(t *testing.T) {
	sc := scenario{base: tree(t, "file a 1", "file d/b 1"), parent: tree(t, "file a 1", "file d/b 1"), child: tree(t, "file a 2", "file d/b 1", "file n new")}
	st := stage(t, t.TempDir(), sc)
	s := &Sweeper{Defer: true}
	out, err := HandBack(context.Background(), st.ws.Path(), HandBackOptions{NoSync: true, Sweeper: s})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	trash := filepath.Join(st.ws.Dir, trashName)
	if got := readTree(t, filepath.Join(trash, baseName)); !maps.Equal(got, st.baseDir) {
		t.Fatalf("trash/base holds %v", got)
	}
	if got := readTree(t, filepath.Join(trash, workName)); !maps.Equal(got, st.child) {
		t.Fatalf("trash/work holds %v", got)
	}
	if d := s.Deferred(); len(d) != 1 || d[0] != trash {
		t.Fatalf("Deferred = %q, want [%s]", d, trash)
	}
	if d := s.Deferred(); len(d) != 0 {
		t.Fatalf("Deferred again = %q, want none", d)
	}
	for range 2 {
		if err := RemoveTrash(context.Background(), trash); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Lstat(trash); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("trash still there: %v", err)
	}
	checkHandBack(t, st, out)
}

// TestRemoveTrashRefusesAnyOtherPath checks RemoveTrash removes nothing that is not the
// trash/ directory of a workspace: a directory named trash elsewhere, a workspace's
// other directories, the workspace itself, a relative path.
func TestRemoveTrashRefusesAnyOtherPath(t *testing.T) {
	sc := scenario{base: tree(t, "file a 1"), parent: tree(t, "file a 1"), child: tree(t, "file a 2")}
	st := stage(t, t.TempDir(), sc)
	elsewhere := filepath.Join(t.TempDir(), trashName)
	if err := os.MkdirAll(filepath.Join(elsewhere, "keep"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{elsewhere, st.ws.Dir, st.ws.Base(), st.ws.Path(), filepath.Join(st.ws.Path(), trashName), trashName, st.ws.Parent} {
		if err := RemoveTrash(context.Background(), p); !errors.Is(err, ErrNotWorkspace) {
			t.Errorf("RemoveTrash(%s) = %v, want ErrNotWorkspace", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "keep")); err != nil {
		t.Errorf("a trash outside a workspace was touched: %v", err)
	}
	if got := readTree(t, st.ws.Base()); !maps.Equal(got, st.baseDir) {
		t.Errorf("the base holds %v", got)
	}
}
