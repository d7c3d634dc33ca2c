package workspaces

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testtree"
)

// needGit requires git (testneed) and gives the test an environment in which no global
// or system git config applies.
func needGit(t *testing.T) {
	t.Helper()
	testneed.Tools(t, "git")
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", home)
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	t.Setenv("GIT_CONFIG_GLOBAL", filepath.Join(home, "gitconfig"))
	t.Setenv("GIT_AUTHOR_NAME", "t")
	t.Setenv("GIT_AUTHOR_EMAIL", "t@example.com")
	t.Setenv("GIT_COMMITTER_NAME", "t")
	t.Setenv("GIT_COMMITTER_EMAIL", "t@example.com")
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestGitRoundTrip copies a real git work tree (tracked and untracked files, not what git
// ignores), lets the child edit, add, remove and rename files while the parent edits
// others, hands back, and checks `git status --porcelain` of the parent shows exactly
// both sides' changes.
func TestGitRoundTrip(t *testing.T) {
	needGit(t)
	dir := t.TempDir()
	parent := filepath.Join(dir, "repo")
	os.Mkdir(parent, 0o755)
	git(t, parent, "init", "-q")
	testtree.Build(t, parent,
		"file .gitignore *.o\nout/\n",
		"file a.txt a", "file b.txt b", "file c.txt c", "file d/e.txt e",
		"file rename_me.txt r", "file keep.txt k", "symlink to-a a.txt",
	)
	git(t, parent, "add", "-A")
	git(t, parent, "commit", "-q", "-m", "base")
	testtree.Build(t, parent, "file x.o obj", "file out/bin bin", "file u.txt untracked", "file secret.txt s")
	os.WriteFile(filepath.Join(parent, ".git", "info", "exclude"), []byte("secret.txt\n"), 0o644)

	res := mustCreate(t, parent, filepath.Join(dir, "state"), "child")
	if !res.Git {
		t.Fatalf("git did not list the parent")
	}
	got := slices.Sorted(maps.Keys(files(readTree(t, res.Path()))))
	want := []string{".gitignore", "a.txt", "b.txt", "c.txt", "d/e.txt", "keep.txt", "rename_me.txt", "to-a", "u.txt"}
	if !slices.Equal(got, want) {
		t.Fatalf("the copy holds %v, want %v", got, want)
	}

	w := res.Path()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(w, "a.txt"), []byte("a by the child"), 0o644))
	must(os.WriteFile(filepath.Join(w, "d", "e.txt"), []byte("e by the child"), 0o644))
	must(os.WriteFile(filepath.Join(w, "new.txt"), []byte("new"), 0o644))
	must(os.Remove(filepath.Join(w, "c.txt")))
	must(os.Rename(filepath.Join(w, "rename_me.txt"), filepath.Join(w, "renamed.txt")))
	must(os.WriteFile(filepath.Join(parent, "b.txt"), []byte("b by the parent"), 0o644))

	out, err := HandBack(context.Background(), w, HandBackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Conflicts) != 0 {
		t.Fatalf("conflicts %+v", out.Conflicts)
	}
	status := strings.Split(strings.TrimRight(git(t, parent, "status", "--porcelain", "--untracked-files=all"), "\n"), "\n")
	slices.Sort(status)
	wantStatus := []string{
		" D c.txt", " D rename_me.txt", " M a.txt", " M b.txt", " M d/e.txt",
		"?? new.txt", "?? renamed.txt", "?? u.txt",
	}
	if !slices.Equal(status, wantStatus) {
		t.Fatalf("git status:\n%s\nwant:\n%s", strings.Join(status, "\n"), strings.Join(wantStatus, "\n"))
	}
	if data, _ := os.ReadFile(filepath.Join(parent, "renamed.txt")); string(data) != "r" {
		t.Fatalf("renamed.txt holds %q", data)
	}
	// Ignored files of the parent are untouched.
	for _, p := range []string{"x.o", "out/bin", "secret.txt"} {
		if _, err := os.Stat(filepath.Join(parent, p)); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
}
