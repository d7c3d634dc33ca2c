package ignore

import (
	"slices"
	"strings"
	"testing"
)

func TestParseIgnoreFile(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string // pat, with "!" for negate and "/" appended for dirOnly
	}{
		{"a\nb", []string{"a", "b"}},
		{"# c\n\n  \n\\#c\n #c", []string{"\\#c", " #c"}},
		{"\xef\xbb\xbfa\r\nb \r\nc\\ \nd\\  \ne\\", []string{"a", "b", "c\\ ", "d\\ ", "e\\"}},
		{"!x/\n!\n/\n!/\nx\x00y", []string{"!x/", "x"}},
		{"\r\n\xef\xbb\xbfz", []string{"\xef\xbb\xbfz"}}, // a BOM counts only at the start
	} {
		var got []string
		for _, p := range parseIgnoreFile([]byte(tc.in)) {
			s := p.pat
			if p.negate {
				s = "!" + s
			}
			if p.dirOnly {
				s += "/"
			}
			got = append(got, s)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("parseIgnoreFile(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzParseIgnoreFile checks that no .gitignore content and no path make
// parsing or matching panic, that every parsed pattern is non-empty, and
// that a line that is an escaped path ignores exactly that path's name.
func FuzzParseIgnoreFile(f *testing.F) {
	f.Add([]byte("*.log\n!keep.log\nbuild/\n/x\n**/y\na/**/b\n\\#c\n[[:digit:]]"), "a/b/c.log", false)
	f.Add([]byte("\xef\xbb\xbf/a**/*\r\n  \n#x"), "a", true)
	f.Add([]byte("[\n[[:\n\\\n!"), "x[", false)
	f.Fuzz(func(t *testing.T, data []byte, rel string, isDir bool) {
		ps := parseIgnoreFile(data)
		for _, p := range ps {
			if p.pat == "" || p.prefix > len(p.pat) {
				t.Fatalf("bad pattern %+v", p)
			}
		}
		comps := strings.Split(rel, "/")
		if slices.Contains(comps, "") || strings.IndexByte(rel, 0) >= 0 {
			return
		}
		offs := make([]int, len(comps))
		for i := 1; i < len(comps); i++ {
			offs[i] = offs[i-1] + len(comps[i-1]) + 1
		}
		r := &rules{patterns: ps}
		r.ignored(rel, offs, isDir)
		name := comps[len(comps)-1]
		if strings.ContainsAny(name, " \r\n") || strings.HasPrefix(name, "#") || strings.HasPrefix(name, "!") {
			return
		}
		lit := &rules{patterns: parseIgnoreFile([]byte(escapeGlob(name)))}
		if !lit.ignored(rel, offs, isDir) {
			t.Fatalf("pattern %q does not ignore %q", escapeGlob(name), rel)
		}
	})
}
