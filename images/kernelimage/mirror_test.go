package kernelimage_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/kennel-dev/kennel/images/kernelimage"
)

func TestPickMirror(t *testing.T) {
	deb822 := `Types: deb
# a comment
URIs: http://deb.debian.org/debian/
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
`
	oneLine := `# deb http://old.example/debian bookworm main
deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm contrib main
deb-src http://src.example/debian bookworm main
`
	cases := []struct {
		name, file, data, suite, want string
	}{
		{"deb822", "debian.sources", deb822, "bookworm", "http://deb.debian.org/debian"},
		{"deb822 security only", "debian.sources", deb822, "bookworm-security", "http://deb.debian.org/debian-security"},
		{"one-line with options", "sources.list", oneLine, "bookworm", "http://mirror.example/debian"},
		{"disabled stanza", "x.sources", "Enabled: no\n" + deb822[:len("Types: deb\n")] + "URIs: http://a/\nSuites: bookworm\nComponents: main\n", "bookworm", ""},
		{"other suite", "sources.list", oneLine, "trixie", ""},
		{"ignored extension", "sources.list.disabled", oneLine, "bookworm", ""},
	}
	for _, c := range cases {
		got, err := kernelimage.PickMirror(kernelimage.ParseSources(c.file, []byte(c.data)), c.suite)
		if c.want == "" {
			if !errors.Is(err, kernelimage.ErrNoMirror) {
				t.Errorf("%s: %q, %v; want ErrNoMirror", c.name, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}

// AptMirror reads a whole apt configuration tree: sources.list first, then
// sources.list.d in name order, skipping files apt would skip.
func TestAptMirror(t *testing.T) {
	root := t.TempDir()
	d := filepath.Join(root, "etc/apt/sources.list.d")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(d, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.list.disabled-by-farm", "deb http://wrong/debian bookworm main\n")
	write("b.sources", "Types: deb\nURIs: http://right/debian\nSuites: bookworm\nComponents: main\n")
	write("c.list", "deb http://later/debian bookworm main\n")
	got, err := kernelimage.AptMirror(root, "bookworm")
	if err != nil || got != "http://right/debian" {
		t.Fatalf("AptMirror: %q, %v", got, err)
	}
	if _, err := kernelimage.AptMirror(t.TempDir(), "bookworm"); !errors.Is(err, kernelimage.ErrNoMirror) {
		t.Fatalf("empty tree: %v", err)
	}
}

func FuzzParseSources(f *testing.F) {
	f.Add("x.sources", "Types: deb\nURIs: http://a/\nSuites: s\nComponents: main\n\n \tcontinued\n")
	f.Add("x.list", "deb [ a=b ] http://a/ s main\ndeb [unterminated http://a s\n")
	f.Fuzz(func(t *testing.T, name, data string) {
		srcs := kernelimage.ParseSources(name, []byte(data))
		m, err := kernelimage.PickMirror(srcs, "s")
		if err == nil && m == "" {
			t.Fatalf("empty mirror without error")
		}
	})
}
