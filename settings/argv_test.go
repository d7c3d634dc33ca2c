package settings

import (
	"bytes"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/kennel-dev/kennel/internal/testneed"
)

func TestParseArgv(t *testing.T) {
	for in, want := range map[string][]string{
		`setsid -w sh -c 'exec "$@"' --`:   {"setsid", "-w", "sh", "-c", `exec "$@"`, "--"},
		`docker exec -i box`:               {"docker", "exec", "-i", "box"},
		`  ssh   -T	host `:                 {"ssh", "-T", "host"},
		`a"b c"d`:                          {"ab cd"},
		`"a\"b\\c\$d\x"`:                   {`a"b\c$d\x`},
		`a\ b \'c`:                         {"a b", "'c"},
		`'' ""`:                            {"", ""},
		`["bwrap", "--ro-bind", "/", "/"]`: {"bwrap", "--ro-bind", "/", "/"},
		` ["x y"] `:                        {"x y"},
		"a\\\nb":                           {"ab"},
	} {
		got, err := ParseArgv(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseArgv(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{``, `   `, `'open`, `"open`, `a\`, `[]`, `["a", 1]`, `[`, "a\x00b"} {
		if got, err := ParseArgv(in); !errors.Is(err, ErrBadArgv) {
			t.Errorf("ParseArgv(%q) = %q, %v; want ErrBadArgv", in, got, err)
		}
	}
}

// shellQuote quotes each word for sh: single quotes, with ' as '\”.
func shellQuote(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("'" + strings.ReplaceAll(a, "'", `'\''`) + "'")
	}
	return b.String()
}

// Words quoted for a shell come back as they were.
func TestParseArgvInvertsShellQuoting(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		argv := rapid.SliceOfN(rapid.StringMatching(`[^\x00]{0,12}`), 1, 6).Draw(t, "argv")
		got, err := ParseArgv(shellQuote(argv))
		if err != nil || !slices.Equal(got, argv) {
			t.Fatalf("ParseArgv(%q) = %q, %v; want %q", shellQuote(argv), got, err, argv)
		}
	})
}

// ParseArgv splits as sh does, for text without expansions.
func TestParseArgvAgreesWithSh(t *testing.T) {
	sh := testneed.Tool(t, "sh")
	for _, in := range []string{
		`setsid -w sh -c 'exec "$@"' --`, `a"b c"d`, `"a\"b\\c\$d\x"`, `a\ b \'c`, `'' ""`,
		`x 'y z' "w  v" \"`, "a\\\nb c", `"\\\\"`, `'\'`, `"it's"`, `a\\b`,
	} {
		got, err := ParseArgv(in)
		if err != nil {
			t.Errorf("ParseArgv(%q): %v", in, err)
			continue
		}
		out, err := exec.Command(sh, "-c", `printf '%s\0' `+in).Output()
		if err != nil {
			t.Errorf("sh on %q: %v", in, err)
			continue
		}
		want := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
		if !slices.Equal(got, want) {
			t.Errorf("ParseArgv(%q) = %q; sh says %q", in, got, want)
		}
	}
}

func FuzzParseArgv(f *testing.F) {
	for _, s := range []string{`setsid -w sh -c 'exec "$@"' --`, `["a","b"]`, `"a\"b"`, `a\ b`, `'`, `"\`, ``} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		argv, err := ParseArgv(s)
		if err != nil {
			return
		}
		if len(argv) == 0 {
			t.Fatalf("ParseArgv(%q) returned no words and no error", s)
		}
		// What it returns, quoted, parses back to itself.
		again, err := ParseArgv(shellQuote(argv))
		if err != nil || !slices.Equal(again, argv) {
			if !bytes.ContainsRune([]byte(strings.Join(argv, "")), 0) {
				t.Fatalf("ParseArgv(%q) = %q, re-quoted: %q, %v", s, argv, again, err)
			}
		}
	})
}

// FuzzParseDocument: any bytes parse or are refused without a panic; what parses decodes
// without a panic, renders to a document that parses to the same thing, and names each
// problem with a pointer into the document.
func FuzzParseDocument(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"version":1,"logLevel":"debug"}`, `{"kernelTransport":{"argvPrefix":["a"],"pathMap":[{"sandbox":"/w","host":"/h"}]}}`,
		`{"truncation":{"bytes":1,"keep":"tail"},"trustedProjects":["/p",1]}`, `{"a":{"a":{"a":[]}}}`, `[`, `{"x":1,"x":2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		root, err := parseDocument(b)
		if err != nil {
			if !errors.Is(err, ErrUnreadable) {
				t.Fatalf("refusal %v is not ErrUnreadable", err)
			}
			return
		}
		_, problems := decodeDocument("f", root)
		for _, p := range problems {
			if !strings.HasPrefix(p.Pointer, "/") {
				t.Fatalf("problem %v has no pointer", p)
			}
		}
		again, err := parseDocument(root.document())
		if err != nil {
			t.Fatalf("rendered document %s does not parse: %v", root.document(), err)
		}
		if mustJSON(again) != mustJSON(root) {
			t.Fatalf("render changed %s to %s", mustJSON(root), mustJSON(again))
		}
	})
}
