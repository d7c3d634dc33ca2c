package ignore

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testtree"
)

// Generated trees and .gitignore files, from a small grammar that reaches
// every rule (nesting, negation, anchoring, dir-only, "**", classes,
// escapes, trailing spaces, comments), listed by Walk, by WalkFS over
// os.DirFS, by Matcher and by git: all four must agree.

var (
	genDirName  = rapid.SampledFrom([]string{"a", "d", "e", "log", "x y"})
	genFileName = rapid.SampledFrom([]string{"a", "b", "ab", "c.log", "d.txt", ".h", "x y", "é", "[a]", "*"})
	genSegment  = rapid.SampledFrom([]string{
		"a", "b", "d", "e", "log", "*", "?", "**", "***", "*.log", "[ab]", "[!a]*", "[^b]", "\\*", "d*",
		"*.txt", ".h", "x\\ y", "x y", "[[:alpha:]]", "?b", "a**", "[a-c]*", "\\[a]", "é", "??", "[a", "[[:digit:]]x", "a\\", "ab*", "x*/",
	})
)

// genLine is one .gitignore line.
var genLine = rapid.Custom(func(t *rapid.T) string {
	switch rapid.IntRange(0, 9).Draw(t, "kind") {
	case 0:
		return "#" + genSegment.Draw(t, "comment")
	case 1:
		return rapid.SampledFrom([]string{"", "   ", "\\#x", "!", "/"}).Draw(t, "odd")
	}
	var b strings.Builder
	if rapid.IntRange(0, 3).Draw(t, "neg") == 0 {
		b.WriteString("!")
	}
	if rapid.IntRange(0, 3).Draw(t, "anchor") == 0 {
		b.WriteString("/")
	}
	n := rapid.IntRange(1, 3).Draw(t, "segments")
	for i := range n {
		if i > 0 {
			b.WriteString("/")
		}
		b.WriteString(genSegment.Draw(t, "segment"))
	}
	if rapid.IntRange(0, 3).Draw(t, "dironly") == 0 {
		b.WriteString("/")
	}
	b.WriteString(rapid.SampledFrom([]string{"", "", "", " ", "  ", "\r"}).Draw(t, "trailing"))
	return b.String()
})

// genTree is a list of tree specs for testtree.Build (paths quoted: a name may hold a space).
var genTree = rapid.Custom(func(t *rapid.T) []string {
	var dirs []string
	for range rapid.IntRange(0, 4).Draw(t, "dirs") {
		d := genDirName.Draw(t, "dir")
		if len(dirs) > 0 && rapid.Bool().Draw(t, "nested") {
			d = rapid.SampledFrom(dirs).Draw(t, "parent") + "/" + d
		}
		dirs = append(dirs, d)
	}
	inDir := func(label string) string {
		if len(dirs) == 0 || rapid.IntRange(0, 2).Draw(t, label+"-root") == 0 {
			return ""
		}
		return rapid.SampledFrom(dirs).Draw(t, label+"-dir") + "/"
	}
	var specs []string
	for range rapid.IntRange(1, 12).Draw(t, "files") {
		specs = append(specs, "file "+strconv.Quote(inDir("file")+genFileName.Draw(t, "name")))
	}
	for range rapid.IntRange(1, 3).Draw(t, "gitignores") {
		lines := rapid.SliceOfN(genLine, 1, 6).Draw(t, "lines")
		specs = append(specs, "file "+strconv.Quote(inDir("gitignore")+".gitignore")+" "+strings.Join(lines, "\n"))
	}
	if rapid.IntRange(0, 3).Draw(t, "symlink") == 0 {
		specs = append(specs, "symlink "+strconv.Quote(inDir("link")+genDirName.Draw(t, "linkname"))+" "+genDirName.Draw(t, "target"))
	}
	return specs
})

func TestWalkMatchesGitProperty(t *testing.T) {
	git := testneed.Tool(t, "git")
	env := gitEnv(t)
	rapid.Check(t, func(rt *rapid.T) {
		specs := genTree.Draw(rt, "tree")
		dir, err := os.MkdirTemp(t.TempDir(), "tree")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		specs = buildTreeLoose(rt, dir, specs)
		want := gitFiles(rt, git, env, dir)
		if got := walkFiles(rt, dir); !slices.Equal(got, want) {
			rt.Fatalf("tree %q\nWalk files\n got %q\nwant %q (git ls-files)", specs, got, want)
		}
		if got := walkFSFiles(rt, dir); !slices.Equal(got, want) {
			rt.Fatalf("tree %q\nWalkFS files\n got %q\nwant %q (git ls-files)", specs, got, want)
		}
		if got := matcherFiles(rt, dir); !slices.Equal(got, want) {
			rt.Fatalf("tree %q\nMatcher files\n got %q\nwant %q (git ls-files)", specs, got, want)
		}
	})
}

// buildTreeLoose builds the specs that fit (a generated tree may name the
// same path as a file and as a directory; the later one is dropped, as is
// a second .gitignore for one directory) and returns them.
func buildTreeLoose(t *rapid.T, dir string, specs []string) []string {
	var built []string
	for _, spec := range specs {
		e, err := testtree.Parse(spec)
		if err != nil {
			t.Fatalf("%v", err)
		}
		if conflicts(dir, e.Path) {
			continue
		}
		testtree.Build(t, dir, spec)
		built = append(built, spec)
	}
	return built
}

// conflicts reports whether name exists under dir or one of its parents
// exists there as something other than a directory.
func conflicts(dir, name string) bool {
	p := filepath.Join(dir, filepath.FromSlash(name))
	if _, err := os.Lstat(p); err == nil {
		return true
	}
	for q := filepath.Dir(p); q != dir && len(q) > len(dir); q = filepath.Dir(q) {
		if fi, err := os.Lstat(q); err == nil && !fi.IsDir() {
			return true
		}
	}
	return false
}
