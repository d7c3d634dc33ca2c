package fshost

import (
	"path"
	"reflect"
	"strings"
	"testing"
)

func TestGlob(t *testing.T) {
	e := newEnv(t, Options{},
		"file w/a.go",
		"file w/.hidden.go",
		"file w/x.txt",
		"file w/b/c.go",
		"file w/b/d/e.go",
		"file w/b/d/f.txt",
		"file w/.gitignore ign/\n",
		"file w/ign/z.go",
		"file w/.git/HEAD",
		"symlink w/ln.go a.go",
		"symlink w/out $ROOT/outside",
		"file r/r.go",
	)
	cases := []struct {
		args      string
		want      []string
		truncated bool
		reason    string
	}{
		{args: `{"pattern": "*.go"}`, want: []string{"/work/.hidden.go", "/work/a.go", "/work/ln.go"}},
		{args: `{"pattern": "**/*.go"}`, want: []string{"/work/.hidden.go", "/work/a.go", "/work/b/c.go", "/work/b/d/e.go", "/work/ln.go"}},
		{args: `{"pattern": "b/**"}`, want: []string{"/work/b/c.go", "/work/b/d/e.go", "/work/b/d/f.txt"}},
		{args: `{"pattern": "b/**/*.txt"}`, want: []string{"/work/b/d/f.txt"}},
		{args: `{"pattern": "b/*/e.go"}`, want: []string{"/work/b/d/e.go"}},
		{args: `{"pattern": "**/d/*"}`, want: []string{"/work/b/d/e.go", "/work/b/d/f.txt"}},
		{args: `{"pattern": "./b/./c.go"}`, want: []string{"/work/b/c.go"}},
		{args: `{"pattern": "*.go", "path": "b"}`, want: []string{"/work/b/c.go"}},
		{args: `{"pattern": "*.go", "cwd": "/work/b/d"}`, want: []string{"/work/b/d/e.go"}},
		{args: `{"pattern": "/work/b/*.go"}`, want: []string{"/work/b/c.go"}},
		{args: `{"pattern": "/work/**/e.go"}`, want: []string{"/work/b/d/e.go"}},
		{args: `{"pattern": "/ro/*.go"}`, want: []string{"/ro/r.go"}},
		{args: `{"pattern": "/work/x.txt"}`, want: []string{"/work/x.txt"}},
		{args: `{"pattern": "out/*"}`, want: []string{}}, // a symlink is not entered
		{args: `{"pattern": "*"}`, want: []string{"/work/.gitignore", "/work/.hidden.go", "/work/a.go", "/work/ln.go", "/work/out", "/work/x.txt"}},
		{args: `{"pattern": "**/z.go"}`, want: []string{}}, // ignored
		{args: `{"pattern": "[a-c].go"}`, want: []string{"/work/a.go"}},
		{args: `{"pattern": "["}`, reason: "invalid"},
		{args: `{"pattern": "../*"}`, reason: "invalid"},
		{args: `{"pattern": ""}`, reason: "invalid"},
		{args: `{"pattern": "*", "path": "a.go"}`, reason: "invalid"},
		{args: `{"pattern": "*", "path": "missing"}`, reason: "not_found"},
		{args: `{"pattern": "/etc/*"}`, reason: "outside"},
	}
	for _, c := range cases {
		var r GlobResult
		err := e.call(t, "fs.glob", c.args, &r)
		if code(err) != c.reason {
			t.Errorf("fs.glob %s: %v; want %q", c.args, err, c.reason)
			continue
		}
		if err == nil && (!reflect.DeepEqual(r.Paths, c.want) || r.Truncated != c.truncated) {
			t.Errorf("fs.glob %s = %q %v; want %q %v", c.args, r.Paths, r.Truncated, c.want, c.truncated)
		}
	}
	e.s = New(e.m, Options{GlobMaxResults: 2})
	var r GlobResult
	must(t, e.call(t, "fs.glob", `{"pattern": "**"}`, &r))
	if !reflect.DeepEqual(r.Paths, []string{"/work/.gitignore", "/work/.hidden.go"}) || !r.Truncated {
		t.Fatalf("bounded glob = %q %v", r.Paths, r.Truncated)
	}
}

// FuzzGlob: the state-set matcher agrees with a plain recursive matcher, and never
// descends away from a path that could match.
func FuzzGlob(f *testing.F) {
	for _, s := range [][2]string{
		{"**/*.go", "a/b/c.go"}, {"a/**/b", "a/b"}, {"**", "x"}, {"a/*/c", "a/b/c"}, {"**/**/x", "x"},
		{"*.go", "a/b.go"}, {"[a-c]?/**", "bz/q"}, {"a/**/b/**/c", "a/x/b/y/b/c"}, {"x", "x/y"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, rel string) {
		g, err := compileGlob(pattern)
		if err != nil || rel == "" || strings.Contains(rel, "//") || strings.HasPrefix(rel, "/") || strings.HasSuffix(rel, "/") {
			return
		}
		comps := strings.Split(rel, "/")
		want := refGlob(g.segs, comps)
		if got := g.matchPath(rel); got != want {
			t.Fatalf("matchPath(%q, %q) = %v; want %v", pattern, rel, got, want)
		}
		st := g.start()
		for i, c := range comps[:len(comps)-1] {
			st = g.step(st, c)
			if want && !g.canDescend(st) {
				t.Fatalf("%q prunes %q before %q matches", pattern, strings.Join(comps[:i+1], "/"), rel)
			}
		}
	})
}

// refGlob matches segments recursively.
func refGlob(segs, comps []string) bool {
	if len(segs) == 0 {
		return len(comps) == 0
	}
	if segs[0] == "**" {
		for i := 0; i <= len(comps); i++ {
			if refGlob(segs[1:], comps[i:]) {
				return true
			}
		}
		return false
	}
	if len(comps) == 0 {
		return false
	}
	ok, _ := path.Match(segs[0], comps[0])
	return ok && refGlob(segs[1:], comps[1:])
}
