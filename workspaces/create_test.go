package workspaces

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testtree"
)

// TestCreateCopiesWhatTheGitignoreFilesKeep checks a copy without git: ignored files and
// directories, .git and special files stay behind; symlinks stay symlinks; modes are kept;
// base and child copy are equal; the manifest is private.
func TestCreateCopiesWhatTheGitignoreFilesKeep(t *testing.T) {
	dir := t.TempDir()
	parent := filepath.Join(dir, "parent")
	testtree.Build(t, parent,
		"file .gitignore *.log\nbuild/\n!keep.log\n",
		"file a.txt a",
		"file x.log ignored",
		"file keep.log kept",
		"file build/out ignored dir",
		"file:0755 src/run.sh #!/bin/sh",
		"file:0600 src/secret s",
		"file src/deep/.gitignore *.tmp",
		"file src/deep/t.tmp ignored",
		"file src/deep/t.txt kept",
		"file .git/config never",
		"symlink link a.txt",
		"symlink dangling ../../nowhere",
		"dir empty",
	)
	if err := os.Chmod(filepath.Join(parent, "src", "deep"), 0o555); err != nil {
		t.Fatal(err)
	}
	if err := mkfifo(filepath.Join(parent, "fifo")); err != nil {
		t.Fatal(err)
	}
	res := mustCreate(t, parent, filepath.Join(dir, "state"), "c1")
	want := tree(t,
		"file .gitignore *.log\nbuild/\n!keep.log\n",
		"file a.txt a",
		"file keep.log kept",
		"file:0755 src/run.sh #!/bin/sh",
		"file:0600 src/secret s",
		"file src/deep/.gitignore *.tmp",
		"file src/deep/t.txt kept",
		"symlink link a.txt",
		"symlink dangling ../../nowhere",
	)
	if got := readTree(t, res.Path()); !maps.Equal(got, want) {
		t.Fatalf("the copy holds\n%v\nwant\n%v", got, want)
	}
	if got := readBase(t, &res.Workspace, private(want)); !maps.Equal(got, private(want)) {
		t.Fatalf("the base holds\n%v\nwant\n%v", got, private(want))
	}
	if res.Git || res.Files != 7 || res.Symlinks != 2 || res.Cloned+res.Copied+res.Digested != 14 {
		t.Fatalf("result %+v", res)
	}
	old := time.Date(2001, 2, 3, 4, 5, 6, 789, time.UTC)
	if err := os.Chtimes(filepath.Join(parent, "a.txt"), old, old); err != nil {
		t.Fatal(err)
	}
	again := mustCreate(t, parent, filepath.Join(dir, "state"), "c2")
	if st, err := os.Stat(filepath.Join(again.Path(), "a.txt")); err != nil || !st.ModTime().Equal(old) {
		t.Fatalf("modification time not kept: %v %v", st.ModTime(), err)
	}
	if st, err := os.Stat(filepath.Join(res.Path(), "src", "deep")); err != nil || st.Mode().Perm() != 0o555 {
		t.Fatalf("directory mode not kept: %v %v", st.Mode(), err)
	}
	for name, mode := range map[string]fs.FileMode{res.Dir: 0o700 | fs.ModeDir, filepath.Join(res.Dir, manifestName): 0o600, filepath.Join(res.Dir, infoName): 0o600} {
		if st, err := os.Stat(name); err != nil || st.Mode() != mode {
			t.Fatalf("%s: mode %v (%v), want %v", name, st.Mode(), err, mode)
		}
	}
	if want := filepath.Join(dir, "state", "workspaces", ParentKey(parent), "c1"); res.Dir != want {
		t.Fatalf("workspace at %s, want %s", res.Dir, want)
	}
	ws, err := Open(res.Path())
	if err != nil || ws.Dir != res.Dir || ws.Parent != parent || ws.ID != "c1" {
		t.Fatalf("Open(copy) = %+v, %v", ws, err)
	}
}

// TestCreateRefusesTooManyFiles checks the limit: a typed error naming the shared mode,
// and nothing left behind.
func TestCreateRefusesTooManyFiles(t *testing.T) {
	dir := t.TempDir()
	parent := filepath.Join(dir, "parent")
	testtree.Build(t, parent, "file a 1", "file b 1", "file c/d 1", "symlink e a")
	state := filepath.Join(dir, "state")
	_, err := Create(context.Background(), parent, CreateOptions{State: state, ID: "big", MaxFiles: 3, Logger: quiet()})
	var tooMany *TooManyFilesError
	if !errors.Is(err, ErrTooManyFiles) || !errors.As(err, &tooMany) || tooMany.Limit != 3 {
		t.Fatalf("error %v, want a TooManyFilesError", err)
	}
	if !strings.Contains(err.Error(), "shared") {
		t.Fatalf("error %q does not name the shared mode", err)
	}
	if _, err := os.Stat(filepath.Join(state, "workspaces", ParentKey(parent), "big")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a refused workspace left its directory: %v", err)
	}
	// At the limit it is fine.
	if _, err := Create(context.Background(), parent, CreateOptions{State: state, ID: "big", MaxFiles: 4, Logger: quiet()}); err != nil {
		t.Fatal(err)
	}
}

// TestCreateRefusesBadIDs checks ids with a slash, dots or other bytes are refused before
// anything is made.
func TestCreateRefusesBadIDs(t *testing.T) {
	dir := t.TempDir()
	parent := filepath.Join(dir, "parent")
	os.Mkdir(parent, 0o755)
	state := filepath.Join(dir, "state")
	for _, id := range []string{"..", ".", "../x", "a/b", "/abs", ".hidden", "-x", "a b", "a\x00", strings.Repeat("a", 65), "é"} {
		_, err := Create(context.Background(), parent, CreateOptions{State: state, ID: id, Logger: quiet()})
		if !errors.Is(err, ErrInvalidID) {
			t.Fatalf("id %q: error %v, want ErrInvalidID", id, err)
		}
	}
	if _, err := os.Stat(state); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("refused ids made the state dir: %v", err)
	}
	for _, id := range []string{"a", "child-1", "x.y_z", strings.Repeat("a", 64)} {
		if err := ValidID(id); err != nil {
			t.Fatalf("ValidID(%q) = %v", id, err)
		}
	}
}

// TestCreateRefusesATakenID checks a second Create with the same id fails and leaves the
// first workspace as it was.
func TestCreateRefusesATakenID(t *testing.T) {
	dir := t.TempDir()
	parent := filepath.Join(dir, "parent")
	testtree.Build(t, parent, "file a 1")
	state := filepath.Join(dir, "state")
	first := mustCreate(t, parent, state, "x")
	_, err := Create(context.Background(), parent, CreateOptions{State: state, ID: "x", Logger: quiet()})
	if !errors.Is(err, ErrExists) {
		t.Fatalf("error %v, want ErrExists", err)
	}
	if got := readTree(t, first.Path()); !maps.Equal(got, tree(t, "file a 1")) {
		t.Fatalf("the first workspace changed: %v", got)
	}
	if _, err := Create(context.Background(), filepath.Join(parent, "a"), CreateOptions{State: state, Logger: quiet()}); !errors.Is(err, ErrNotDirectory) {
		t.Fatalf("a file as parent: %v, want ErrNotDirectory", err)
	}
}

// TestCreateWarnsOnceWithTheCounts checks a copy that could not clone logs exactly one
// warning with both counts, and the counts are in the result.
func TestCreateWarnsOnceWithTheCounts(t *testing.T) {
	dir := t.TempDir()
	parent := filepath.Join(dir, "parent")
	os.Mkdir(parent, 0o755)
	specs := []string{"symlink l f0"}
	for i := range 20 {
		specs = append(specs, fmt.Sprintf("file d%d/f%d %s", i%3, i, strings.Repeat("x", i*100)))
	}
	testtree.Build(t, parent, specs...)
	var logs bytes.Buffer
	res, err := Create(context.Background(), parent, CreateOptions{State: filepath.Join(dir, "state"), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cloned+res.Copied+res.Digested != 40 || res.Files != 20 || res.Symlinks != 1 {
		t.Fatalf("result %+v", res)
	}
	lines := strings.Count(logs.String(), "\n")
	switch {
	case res.Copied == 0 && lines != 0:
		t.Fatalf("a copy that cloned everything logged:\n%s", logs.String())
	case res.Copied > 0 && (lines != 1 || !strings.Contains(logs.String(), "level=WARN") ||
		!strings.Contains(logs.String(), fmt.Sprintf("cloned=%d copied=%d", res.Cloned, res.Copied))):
		t.Fatalf("want one warning with cloned=%d copied=%d, got:\n%s", res.Cloned, res.Copied, logs.String())
	}
}

// TestParentKey checks the parent's directory name: safe, readable, distinct for two
// parents of the same base name.
func TestParentKey(t *testing.T) {
	a, b := ParentKey("/home/me/project"), ParentKey("/srv/project")
	if a == b || !strings.HasPrefix(a, "project-") || len(a) != len("project-")+16 {
		t.Fatalf("keys %q %q", a, b)
	}
	if got := ParentKey("/"); !strings.HasPrefix(got, "root-") {
		t.Fatalf("ParentKey(/) = %q", got)
	}
	if got := ParentKey("/x/.hidden dir/"); !strings.HasPrefix(got, "_hidden_dir-") {
		t.Fatalf("ParentKey = %q", got)
	}
}

// TestCreateWithTheStateInsideTheParent checks a state directory inside the parent is not
// copied into the workspace.
func TestCreateWithTheStateInsideTheParent(t *testing.T) {
	parent := t.TempDir()
	testtree.Build(t, parent, "file a 1")
	mustCreate(t, parent, parent, "one") // the state is the parent itself
	res := mustCreate(t, parent, parent, "two")
	if got := readTree(t, res.Path()); !maps.Equal(got, tree(t, "file a 1")) {
		t.Fatalf("the copy holds %v", got)
	}
}

// TestCreateSplitsLargeDirectoriesAndKeepsModes checks a copy by several workers of a
// directory larger than one job (split over workers), files at the top and deep down,
// and modes the umask or a clone would change (read-only, setuid, setgid, sticky): both
// copies hold every file, the child's copy with its exact mode and modification time;
// a socket and a FIFO are left out.
func TestCreateSplitsLargeDirectoriesAndKeepsModes(t *testing.T) {
	dir := t.TempDir()
	parent := filepath.Join(dir, "parent")
	specs := []string{"file top t", "file big/sub/deep/x x", "symlink big/l sub/deep/x"}
	for i := range 3*copyBatch + 7 {
		specs = append(specs, fmt.Sprintf("file big/f%04d %s", i, strings.Repeat("b", i%50)))
	}
	modes := map[string]fs.FileMode{
		"ro": 0o444, "x": 0o755, "group": 0o664, "open": 0o777, "private": 0o600,
		"setuid": fs.ModeSetuid | 0o755, "setgid": fs.ModeSetgid | 0o755, "sticky": fs.ModeSticky | 0o644,
	}
	for name := range modes {
		specs = append(specs, fmt.Sprintf("file modes/%s %s", name, name))
	}
	testtree.Build(t, parent, specs...)
	old := time.Date(2001, 2, 3, 4, 5, 6, 7, time.UTC)
	for name, mode := range modes {
		p := filepath.Join(parent, "modes", name)
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if err := mkfifo(filepath.Join(parent, "big", "fifo")); err != nil {
		t.Fatal(err)
	}
	sock, err := net.Listen("unix", filepath.Join(parent, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	want := readTree(t, parent)
	delete(want, "big/fifo")
	delete(want, "sock")
	res, err := Create(context.Background(), parent, CreateOptions{State: filepath.Join(dir, "state"), ID: "c", Workers: 3, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if got := readTree(t, res.Path()); !maps.Equal(got, want) {
		t.Fatalf("the copy differs from the parent:\n%v\nwant\n%v", got, want)
	}
	if got := readBase(t, &res.Workspace, private(want)); !maps.Equal(got, private(want)) {
		t.Fatalf("the base differs from the parent:\n%v", got)
	}
	if n := 3*copyBatch + 7 + 2 + len(modes); res.Files != n || res.Symlinks != 1 || res.Cloned+res.Copied+res.Digested != 2*n {
		t.Fatalf("result %+v, want %d files", res, n)
	}
	for name, mode := range modes {
		st, err := os.Stat(filepath.Join(res.Path(), "modes", name))
		if err != nil || st.Mode()&^fs.ModeType != mode || !st.ModTime().Equal(old) {
			t.Errorf("%s: mode %v time %v (%v), want %v %v", name, st.Mode(), st.ModTime(), err, mode, old)
		}
	}
}

// TestCreateKeepsSmallCachedFilesAsDigests checks the base of each kind of file: a small
// file whose bytes are cached is its SHA-256 in the manifest (nothing in base/); a file
// over DigestMax, or one evicted from the page cache, is a copy in base/. Then a hand-back
// tells, against a digest, a child's rewrite of the same bytes (unchanged: the parent's
// change stands, no conflict) from a real change (taken).
func TestCreateKeepsSmallCachedFilesAsDigests(t *testing.T) {
	dir := t.TempDir()
	parent := filepath.Join(dir, "parent")
	testtree.Build(t, parent, "file small hello", "file cold cold bytes", "file big "+strings.Repeat("b", 100))
	evict(t, filepath.Join(parent, "cold"))
	res, err := Create(context.Background(), parent, CreateOptions{State: filepath.Join(dir, "state"), ID: "c", DigestMax: 64, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Digested != 1 || res.Cloned+res.Copied != 5 {
		t.Fatalf("result %+v, want 1 digest and 5 copies", res)
	}
	m, err := readManifest(filepath.Join(res.Dir, manifestName))
	if err != nil {
		t.Fatal(err)
	}
	for p, digest := range map[string]bool{"small": true, "cold": false, "big": false} {
		e := m.get(p)
		if e == nil || e.HasDigest != digest {
			t.Fatalf("%s: manifest entry %+v, want digest %v", p, e, digest)
		}
		_, err := os.Lstat(filepath.Join(res.Base(), p))
		if inBase := err == nil; inBase == digest {
			t.Fatalf("%s: in base/ %v, digest %v", p, inBase, digest)
		}
	}
	if e := m.get("small"); e.Digest != sha256.Sum256([]byte("hello")) {
		t.Fatalf("small's digest %x", e.Digest)
	}
	// The child rewrites small with its bytes and changes cold; the parent changes small.
	later := time.Now().Add(time.Hour)
	if err := os.WriteFile(filepath.Join(res.Path(), "small"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(filepath.Join(res.Path(), "small"), later, later)
	if err := os.WriteFile(filepath.Join(res.Path(), "cold"), []byte("warm"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(parent, "small"), []byte("parent's"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := HandBack(context.Background(), res.Path(), HandBackOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Conflicts) != 0 || !slices.Equal(out.Taken, []string{"cold"}) {
		t.Fatalf("outcome %+v, want cold taken and no conflict", out)
	}
	got := readTree(t, parent)
	if got["small"].Content != "parent's" || got["cold"].Content != "warm" || got["big"].Content != strings.Repeat("b", 100) {
		t.Fatalf("parent holds %v", got)
	}
}

// evict drops the file p's bytes from the page cache (fails under CI=true, else skips, if
// the file system keeps them).
func evict(t *testing.T, p string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	var cs unix.Cachestat_t
	err = unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{}, &cs, 0)
	testneed.Need(t, err == nil && cs.Cache == 0, fmt.Sprintf("a page cache that drops %s on FADV_DONTNEED (cachestat: %d pages, %v)", p, cs.Cache, err))
}
