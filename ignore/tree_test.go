package ignore

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tb is what the helpers need of a *testing.T or a *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
}

func mustMkdir(t tb, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

// gitEnv is an environment in which no global or system git config, and
// so no global excludes file, applies.
func gitEnv(t testing.TB) []string {
	home := t.TempDir()
	env := []string{"HOME=" + home, "XDG_CONFIG_HOME=" + home, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=" + filepath.Join(home, "none"), "PATH=" + os.Getenv("PATH"), "LC_ALL=C"}
	return env
}

// gitFiles runs git init in dir (once) and returns what
// `git ls-files -co --exclude-standard` lists there: the files git does not
// ignore.
func gitFiles(t tb, git string, env []string, dir string) []string {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(dir, ".git", "HEAD")); err != nil {
		run(t, git, env, dir, "init", "-q")
	}
	out := run(t, git, env, dir, "ls-files", "-co", "--exclude-standard", "-z")
	var files []string
	for _, f := range bytes.Split(out, []byte{0}) {
		if len(f) > 0 {
			files = append(files, string(f))
		}
	}
	slices.Sort(files)
	return files
}

func run(t tb, git string, env []string, dir string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(git, args...)
	cmd.Dir = dir
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, stderr.Bytes())
	}
	return out
}

// walkFiles returns the non-directories Walk reports under dir, sorted,
// and checks the order Walk gave them in is filepath.WalkDir's.
func walkFiles(t tb, dir string) []string {
	t.Helper()
	var files, all []string
	err := Walk(context.Background(), dir, func(rel string, d fs.DirEntry) error {
		all = append(all, rel)
		if !d.IsDir() {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Walk: %v", err)
	}
	if !slices.IsSortedFunc(all, compareWalkOrder) {
		t.Errorf("Walk order is not WalkDir order: %q", all)
	}
	slices.Sort(files)
	return files
}

// walkFSFiles is walkFiles for WalkFS over os.DirFS(dir), and checks that
// WalkFS reports exactly what Walk reports, in the same order, with the
// same types.
func walkFSFiles(t tb, dir string) []string {
	t.Helper()
	type entry struct {
		rel string
		typ fs.FileMode
	}
	collect := func(walk func(fn func(rel string, d fs.DirEntry) error) error) []entry {
		var all []entry
		if err := walk(func(rel string, d fs.DirEntry) error {
			all = append(all, entry{rel, d.Type()})
			return nil
		}); err != nil {
			t.Fatalf("walk: %v", err)
		}
		return all
	}
	got := collect(func(fn func(rel string, d fs.DirEntry) error) error {
		return WalkFS(context.Background(), os.DirFS(dir), ".", fn)
	})
	want := collect(func(fn func(rel string, d fs.DirEntry) error) error {
		return Walk(context.Background(), dir, fn)
	})
	if !slices.Equal(got, want) {
		t.Errorf("WalkFS entries\n got %v\nwant %v (Walk)", got, want)
	}
	var files []string
	for _, e := range got {
		if !e.typ.IsDir() {
			files = append(files, e.rel)
		}
	}
	slices.Sort(files)
	return files
}

// compareWalkOrder orders slash paths as filepath.WalkDir visits them:
// component by component.
func compareWalkOrder(a, b string) int {
	return slices.Compare(strings.Split(a, "/"), strings.Split(b, "/"))
}

// matcherFiles returns the files under dir (all of them, found with
// filepath.WalkDir, .git left out) that a fresh Matcher says are not
// ignored.
func matcherFiles(t tb, dir string) []string {
	t.Helper()
	m := New(dir)
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Name() == ".git" {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." || d.IsDir() {
			return nil
		}
		if !m.Ignored(filepath.ToSlash(rel), false) {
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	return files
}
