package fshost

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"

	"github.com/kennel-dev/kennel/pathmap"
)

var grepTree = []string{
	"file w/.gitignore ignored.txt\nbuild/\n",
	"file w/ignored.txt needle\n",
	"file w/build/x needle\n",
	"file w/.git/config needle\n",
	"file w/a.go package a\nneedle one\nno\nneedle two\n",
	"file w/b/c.txt x\nNeedle\nneedle three",
	"file w/bin needle\x00\n",
	"file w/bad needle\n\xff\n",
	"symlink w/link a.go",
	"symlink w/out $ROOT/outside",
	"file r/ro.txt needle ro\n",
}

func TestGrep(t *testing.T) {
	e := newEnv(t, Options{}, grepTree...)
	m := func(p string, line int, text string) Match { return Match{Path: p, Line: line, Text: text} }
	all := []Match{m("/work/a.go", 2, "needle one"), m("/work/a.go", 4, "needle two"), m("/work/b/c.txt", 3, "needle three")}
	cases := []struct {
		args      string
		want      []Match
		truncated bool
		reason    string
	}{
		{args: `{"pattern": "needle"}`, want: all},
		{args: `{"pattern": "needle", "path": "/work"}`, want: all},
		{args: `{"pattern": "needle", "path": "."}`, want: all},
		{args: `{"pattern": "^needle (one|three)$"}`, want: []Match{all[0], all[2]}},
		{args: `{"pattern": "\\Aneedle t"}`, want: []Match{all[1], all[2]}},
		{args: `{"pattern": "e t[wh]"}`, want: []Match{all[1], all[2]}},
		{args: `{"pattern": "(?i)^needle$"}`, want: []Match{m("/work/b/c.txt", 2, "Needle")}},
		{args: `{"pattern": "needle", "limit": 2}`, want: all[:2], truncated: true},
		{args: `{"pattern": "needle", "limit": 1}`, want: all[:1], truncated: true},
		{args: `{"pattern": "needle", "limit": 3}`, want: all},
		{args: `{"pattern": "needle", "glob": "*.txt"}`, want: all[2:]},
		{args: `{"pattern": "needle", "glob": "b/*"}`, want: all[2:]},
		{args: `{"pattern": "needle", "path": "a.go"}`, want: all[:2]},
		{args: `{"pattern": "needle", "path": "link"}`, want: []Match{m("/work/a.go", 2, "needle one"), m("/work/a.go", 4, "needle two")}},
		{args: `{"pattern": "needle", "path": "b", "cwd": "/work"}`, want: all[2:]},
		{args: `{"pattern": "needle", "path": "/ro"}`, want: []Match{m("/ro/ro.txt", 1, "needle ro")}},
		{args: `{"pattern": "nothing here"}`, want: []Match{}},
		{args: `{"pattern": "("}`, reason: "invalid"},
		{args: `{"pattern": ""}`, reason: "invalid"},
		{args: `{"pattern": "x", "glob": "["}`, reason: "invalid"},
		{args: `{"pattern": "x", "path": "missing"}`, reason: "not_found"},
	}
	for _, c := range cases {
		var r GrepResult
		err := e.call(t, "fs.grep", c.args, &r)
		if code(err) != c.reason {
			t.Errorf("fs.grep %s: %v; want %q", c.args, err, c.reason)
			continue
		}
		if err == nil && (!reflect.DeepEqual(r.Matches, c.want) || r.Truncated != c.truncated) {
			t.Errorf("fs.grep %s = %+v truncated %v; want %+v truncated %v", c.args, r.Matches, r.Truncated, c.want, c.truncated)
		}
	}
	// The byte bound and the line cut.
	e.s = New(e.m, Options{GrepMaxBytes: 60, MaxLineBytes: 4})
	var r GrepResult
	must(t, e.call(t, "fs.grep", `{"pattern": "needle"}`, &r))
	if len(r.Matches) != 2 || !r.Truncated || r.Matches[0].Text != "need" {
		t.Fatalf("bounded grep = %+v truncated %v", r.Matches, r.Truncated)
	}
}

// A file larger than grep reads whole is searched in chunks, with the same line numbers.
func TestGrepChunked(t *testing.T) {
	e := newEnv(t, Options{})
	e.s.sizes.grepWhole, e.s.sizes.grepChunk = 64<<10, 1000
	f, err := os.Create(e.work + "/big")
	must(t, err)
	line := strings.Repeat("filler text ", 10) + "\n"
	var want []Match
	n := 0
	for size := 0; size <= e.s.sizes.grepWhole*3; size += len(line) {
		n++
		if n%100 == 0 {
			fmt.Fprintf(f, "needle %d\n", n)
			want = append(want, Match{Path: "/work/big", Line: n, Text: fmt.Sprintf("needle %d", n)})
			continue
		}
		f.WriteString(line)
	}
	fmt.Fprintf(f, "%s needle long line\n", strings.Repeat("x", 3000)) // longer than a chunk
	want = append(want, Match{Path: "/work/big", Line: n + 1, Text: strings.Repeat("x", DefaultMaxLineBytes)})
	fmt.Fprintf(f, "needle last")
	want = append(want, Match{Path: "/work/big", Line: n + 2, Text: "needle last"})
	must(t, f.Close())
	r, err := e.s.Grep(context.Background(), GrepArgs{Pattern: "needle"})
	must(t, err)
	if !reflect.DeepEqual(r.Matches, want) {
		t.Fatalf("chunked grep = %+v; want %+v", r.Matches, want)
	}
}

// The parallel, bounded search equals a plain sequential one: for generated trees,
// patterns, limits and worker counts, the reply is the first matches in walk order.
func TestGrepProperty(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	rapid.Check(t, func(rt *rapid.T) {
		root, err := os.MkdirTemp(base, "t")
		must(t, err)
		words := []string{"foo", "bar", "foobar", "Foo", "baz", "", "x\x00", "é"}
		nfiles := rapid.IntRange(1, 12).Draw(rt, "files")
		for i := range nfiles {
			dir := rapid.SampledFrom([]string{"", "a/", "a/b/", "c/"}).Draw(rt, "dir")
			lines := rapid.SliceOfN(rapid.SliceOfN(rapid.SampledFrom(words), 0, 3), 0, 8).Draw(rt, "lines")
			var b strings.Builder
			for _, l := range lines {
				b.WriteString(strings.Join(l, " ") + "\n")
			}
			p := filepath.Join(root, dir, fmt.Sprintf("f%d", i))
			must(t, os.MkdirAll(filepath.Dir(p), 0o755))
			must(t, os.WriteFile(p, []byte(b.String()), 0o644))
		}
		pattern := rapid.SampledFrom([]string{"foo", "^foo", "bar$", "o+b", "(?i)foo", "fo*", "ba[rz]", "foo|baz", `\bfoo\b`, "^$", `\Afoo`, "é"}).Draw(rt, "pattern")
		limit := rapid.IntRange(1, 20).Draw(rt, "limit")
		workers := rapid.IntRange(1, 4).Draw(rt, "workers")
		m, err := pathmap.New(pathmap.Config{Dir: root})
		must(t, err)
		defer m.Close()
		s := New(m, Options{Workers: workers, GrepMaxMatches: limit})
		got, err := s.Grep(context.Background(), GrepArgs{Pattern: pattern})
		if err != nil {
			rt.Fatalf("grep: %v", err)
		}
		want, truncated := referenceGrep(t, root, pattern, limit)
		if !reflect.DeepEqual(got.Matches, want) || got.Truncated != truncated {
			rt.Fatalf("grep %q limit %d workers %d = %+v %v; want %+v %v", pattern, limit, workers, got.Matches, got.Truncated, want, truncated)
		}
	})
}

// referenceGrep searches every file line by line, in filepath.WalkDir order.
func referenceGrep(t testing.TB, root, pattern string, limit int) ([]Match, bool) {
	re := regexp.MustCompile(pattern)
	out := []Match{}
	truncated := false
	must(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.ContainsRune(string(data[:min(len(data), 8192)]), 0) || !utf8.Valid(data) {
			return nil
		}
		lines := strings.Split(string(data), "\n")
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		for i, l := range lines {
			if re.MatchString(l) {
				if len(out) == limit {
					truncated = true
					return fs.SkipAll
				}
				out = append(out, Match{Path: p, Line: i + 1, Text: l})
			}
		}
		return nil
	}))
	return out, truncated
}

// FuzzGrepSearch: the buffer search (literal fast paths, whole-buffer regexp) finds
// exactly the lines a line-by-line regexp match finds.
func FuzzGrepSearch(f *testing.F) {
	for _, s := range [][2]string{
		{"foo", "a foo\nfoo\nbar\n"}, {"^foo$", "foo\nfoox\n foo\nfoo"}, {`a\s+b`, "a\nb\na b\n"},
		{`\Afoo`, "foo\nfoo\n"}, {`foo\z`, "foo\nxfoo\n"}, {"x*", "\n\nx\n"}, {"(?i)FOO", "foo\nFoO\n"},
		{"[^a]", "a\n\na\nb"}, {`\bword\b`, "word\nwords\n word"}, {"a.c", "abc\na\nc"}, {"é+", "é\nee\n"},
		{"foo.*bar", "foo\nbar\nfoo bar\n"}, {"(foo)+baz", "foofoobaz\nbaz"}, {"$", "a\n\n"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, text string) {
		mt, err := compileMatcher(pattern)
		if err != nil {
			return
		}
		var got []int
		buf := []byte(text)
		mt.search(buf, func(ls, le int) bool {
			if le > len(buf) || ls > le || (ls > 0 && buf[ls-1] != '\n') || (le < len(buf) && buf[le] != '\n') {
				t.Fatalf("emit(%d, %d) is not a line of %q", ls, le, text)
			}
			got = append(got, strings.Count(text[:ls], "\n"))
			return true
		})
		lineRe := regexp.MustCompile("(?m:" + pattern + ")")
		var want []int
		lines := strings.Split(text, "\n")
		if len(lines) > 0 && lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		for i, l := range lines {
			if lineRe.MatchString(l) {
				want = append(want, i)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("search(%q, %q) = lines %v; want %v", pattern, text, got, want)
		}
	})
}
