package ignore

import (
	"path"
	"strings"
	"testing"
	"unicode/utf8"
)

// wildmatchCases are from git's t/t3070-wildmatch.sh (the glob rules the
// .gitignore tests lean on); pathname is WM_PATHNAME.
var wildmatchCases = []struct {
	pat, text string
	pathname  bool
	want      bool
}{
	{"foo", "foo", false, true},
	{"foo", "bar", false, false},
	{"", "", false, true},
	{"???", "foo", false, true},
	{"??", "foo", false, false},
	{"*", "foo", false, true},
	{"f*", "foo", false, true},
	{"*f", "foo", false, false},
	{"*foo*", "foo", false, true},
	{"*ob*a*r*", "foobar", false, true},
	{"*ab", "aaaaaaabababab", false, true},
	{"foo\\*", "foo*", false, true},
	{"foo\\*bar", "foobar", false, false},
	{"f\\\\oo", "f\\oo", false, true},
	{"foo\\", "foo\\", false, false},
	{"*[al]?", "ball", false, true},
	{"[ten]", "ten", false, false},
	{"**[!te]", "ten", false, true},
	{"**[!ten]", "ten", false, false},
	{"t[a-g]n", "ten", false, true},
	{"t[!a-g]n", "ten", false, false},
	{"t[!a-g]n", "ton", false, true},
	{"t[^a-g]n", "ton", false, true},
	{"a[]]b", "a]b", false, true},
	{"a[]-]b", "a-b", false, true},
	{"a[]-]b", "a]b", false, true},
	{"a[]-]b", "aab", false, false},
	{"a[]a-]b", "aab", false, true},
	{"]", "]", false, true},
	{"[\\-_]", "-", false, true},
	{"[\\]]", "]", false, true},
	{"[\\\\]", "\\", false, true},
	{"[!\\\\]", "\\", false, false},
	{"[A-\\\\]", "G", false, true},
	{"[a", "a", false, false},
	{"[[:foo:]]", "f", false, false},
	{"[[:alpha:]][[:digit:]][[:upper:]]", "a1B", false, true},
	{"[[:digit:][:upper:][:space:]]", "A", false, true},
	{"[[:digit:][:upper:][:space:]]", "1", false, true},
	{"[[:digit:][:upper:][:space:]]", ".", false, false},
	{"[[:digit:][:punct:][:space:]]", ".", false, true},
	{"[[:xdigit:]]", "5", false, true},
	{"[a-c[:digit:]x-z]", "5", false, true},
	{"[a-c[:digit:]x-z]", "b", false, true},
	{"[a-c[:digit:]x-z]", "y", false, true},
	{"[a-c[:digit:]x-z]", "q", false, false},
	{"foo*bar", "foo/baz/bar", false, true},
	{"foo*bar", "foo/baz/bar", true, false},
	{"foo**bar", "foo/baz/bar", true, false},
	{"foo**bar", "foobazbar", true, true},
	{"foo/**/bar", "foo/baz/bar", true, true},
	{"foo/**/**/bar", "foo/baz/bar", true, true},
	{"foo/**/bar", "foo/b/a/z/bar", true, true},
	{"foo/**/bar", "foo/bar", true, true},
	{"foo/**/**/bar", "foo/bar", true, true},
	{"foo?bar", "foo/bar", true, false},
	{"foo[/]bar", "foo/bar", true, false},
	{"foo[^a-z]bar", "foo/bar", true, false},
	{"f[^eiu][^eiu][^eiu][^eiu][^eiu]r", "foo-bar", true, true},
	{"**/foo", "foo", true, true},
	{"**/foo", "XXX/foo", true, true},
	{"**/foo", "bar/baz/foo", true, true},
	{"*/foo", "bar/baz/foo", true, false},
	{"**/bar*", "foo/bar/baz", true, false},
	{"**/bar/*", "deep/foo/bar/baz", true, true},
	{"**/bar/*", "deep/foo/bar/baz/", true, false},
	{"**/bar/**", "deep/foo/bar/baz/", true, true},
	{"**/bar/*", "deep/foo/bar", true, false},
	{"**/bar/**", "deep/foo/bar/", true, true},
	{"*/bar/**", "foo/bar/baz/x", true, true},
	{"*/bar/**", "deep/foo/bar/baz/x", true, false},
	{"**/bar/*/*", "deep/foo/bar/baz/x", true, true},
	{"-*-*-*-*-*-*-12-*-*-*-m-*-*-*", "-adobe-courier-bold-o-normal--12-120-75-75-m-70-iso8859-1", false, true},
	{"-*-*-*-*-*-*-12-*-*-*-m-*-*-*", "-adobe-courier-bold-o-normal--12-120-75-75-X-70-iso8859-1", false, false},
	{"XXX/*/*/*/*/*/*/12/*/*/*/m/*/*/*", "XXX/adobe/courier/bold/o/normal//12/120/75/75/m/70/iso8859/1", true, true},
	{"**/*a*b*g*n*t", "abcd/abcdefg/abcdefghijk/abcdefghijklmnop.txt", true, true},
	{"**/*a*b*g*n*t", "abcd/abcdefg/abcdefghijk/abcdefghijklmnop.txtz", true, false},
	{"*/*/*", "foo/bb/aa/rr", true, false},
	{"**/**/**", "foo/bb/aa/rr", true, true},
	{"*X*i", "abcXdefXghi", false, true},
	{"*/*X*/*/*i", "ab/cXd/efXg/hi", true, true},
	{"**/*X*/**/*i", "ab/cXd/efXg/hi", true, true},
	{"?", "é", false, false}, // bytes, not runes
	{"??", "é", false, true},
}

func TestWildmatch(t *testing.T) {
	for _, tc := range wildmatchCases {
		if got := wildmatch(tc.pat, tc.text, tc.pathname); got != tc.want {
			t.Errorf("wildmatch(%q, %q, pathname=%v) = %v, want %v", tc.pat, tc.text, tc.pathname, got, tc.want)
		}
	}
}

// TestWildmatchPathologic: the aborts keep a hostile glob polynomial (a
// naive backtracking matcher takes exponential time on these).
func TestWildmatchPathologic(t *testing.T) {
	text := strings.Repeat("a", 200)
	for _, pat := range []string{strings.Repeat("*a", 30) + "b", strings.Repeat("**/a", 30) + "b"} {
		if wildmatch(pat, text, true) || wildmatch(pat, strings.Repeat("a/", 100), true) {
			t.Errorf("%q matched", pat)
		}
	}
}

// escapeGlob returns a glob that matches exactly s.
func escapeGlob(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if isGlobSpecial(s[i]) {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// FuzzWildmatch checks wildmatch never panics and keeps laws that hold for
// every glob: an escaped text matches itself; a glob without special bytes
// matches only itself; "*"+g matches x+s when g matches s (no pathname);
// and with pathname, on ASCII, a glob of literals, '*' and '?' (no "**")
// matches as path.Match does.
func FuzzWildmatch(f *testing.F) {
	for _, tc := range wildmatchCases {
		f.Add(tc.pat, tc.text, "x")
	}
	f.Fuzz(func(t *testing.T, pat, text, prefix string) {
		if strings.IndexByte(pat, 0) >= 0 || strings.IndexByte(text, 0) >= 0 || strings.IndexByte(prefix, 0) >= 0 {
			t.Skip("NUL cannot occur")
		}
		for _, pathname := range []bool{false, true} {
			m := wildmatch(pat, text, pathname)
			if !wildmatch(escapeGlob(text), text, pathname) {
				t.Fatalf("escaped %q does not match itself", text)
			}
			if simpleLength(pat) == len(pat) && m != (pat == text) {
				t.Fatalf("literal %q vs %q: %v", pat, text, m)
			}
			if !pathname && m && !wildmatch("*"+pat, prefix+text, false) {
				t.Fatalf("%q matches %q but *%q does not match %q", pat, text, pat, prefix+text)
			}
		}
		if !strings.ContainsAny(pat, "[\\") && !strings.Contains(pat, "**") && isASCII(text) && isASCII(pat) {
			want, err := path.Match(pat, text)
			if err == nil && wildmatch(pat, text, true) != want {
				t.Fatalf("wildmatch(%q, %q) = %v, path.Match %v", pat, text, !want, want)
			}
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
