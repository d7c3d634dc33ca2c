package testtree

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestParseReadsEverySpecForm: each form of the doc, parsed.
func TestParseReadsEverySpecForm(t *testing.T) {
	for spec, want := range map[string]Entry{
		"dir a/b":                     {Kind: Dir, Path: "a/b", Mode: 0o755},
		"dir a/b/":                    {Kind: Dir, Path: "a/b", Mode: 0o755},
		"dir:0700 p":                  {Kind: Dir, Path: "p", Mode: 0o700},
		"file a/x.txt one\ntwo\n":     {Kind: File, Path: "a/x.txt", Mode: 0o644, Content: "one\ntwo\n"},
		"file a/empty":                {Kind: File, Path: "a/empty", Mode: 0o644},
		"file e ":                     {Kind: File, Path: "e", Mode: 0o644},
		"file s  two spaces":          {Kind: File, Path: "s", Mode: 0o644, Content: " two spaces"},
		"file:0755 bin/run #!/bin/sh": {Kind: File, Path: "bin/run", Mode: 0o755, Content: "#!/bin/sh"},
		"file:4755 suid x":            {Kind: File, Path: "suid", Mode: fs.ModeSetuid | 0o755, Content: "x"},
		"file:1644 sticky":            {Kind: File, Path: "sticky", Mode: fs.ModeSticky | 0o644},
		"symlink a/up ../..":          {Kind: Symlink, Path: "a/up", Content: "../.."},
		"symlink l a target":          {Kind: Symlink, Path: "l", Content: "a target"},
		"symlink a/abs $ROOT/a/b":     {Kind: Symlink, Path: "a/abs", Content: "$ROOT/a/b"},
		"hardlink a/h a/x.txt":        {Kind: Hardlink, Path: "a/h", Content: "a/x.txt"},
		"fifo a/p":                    {Kind: FIFO, Path: "a/p", Mode: 0o644},
		`file "a/with space" text`:    {Kind: File, Path: "a/with space", Mode: 0o644, Content: "text"},
		`file "trail  "`:              {Kind: File, Path: "trail  ", Mode: 0o644},
		`file "\"q" x`:                {Kind: File, Path: `"q`, Mode: 0o644, Content: "x"},
		`file "plain" x`:              {Kind: File, Path: "plain", Mode: 0o644, Content: "x"},
		`file b\ x`:                   {Kind: File, Path: `b\`, Mode: 0o644, Content: "x"},
	} {
		got, err := Parse(spec)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", spec, got, err, want)
		}
	}
}

// TestParseRefusesWhatItCannotBuild: a spec Build could not make, or could make only
// outside the root, is an error that quotes it.
func TestParseRefusesWhatItCannotBuild(t *testing.T) {
	for _, spec := range []string{
		"", "file", "file ", "link l t", "files a", "dir", "dir a b", "fifo p x",
		"symlink l", "symlink l ", "hardlink h", "symlink:0755 l t",
		"file:9 a", "file:0x1 a", "file:10000 a", "file: a",
		"file /etc/x", "file ../x", "file a/../../x", "dir ..", "file a/",
		`file "unterminated x`, `file "a"b x`, `file "" x`,
	} {
		if e, err := Parse(spec); err == nil || !strings.Contains(err.Error(), strconv.Quote(spec)) {
			t.Errorf("Parse(%q) = %+v, %v; want an error quoting it", spec, e, err)
		}
	}
}

// TestBuildMakesTheTreeItsSpecsSay: every kind on disk, with exact modes whatever the
// umask, links as written ($ROOT replaced), a rewritten file.
func TestBuildMakesTheTreeItsSpecsSay(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	root := filepath.Join(t.TempDir(), "root")
	Build(t, root,
		"dir a/b",
		"file a/x.txt one\ntwo\n",
		"file:0755 bin/run #!/bin/sh",
		"symlink a/up ../..",
		"symlink a/abs $ROOT/a/b",
		"hardlink a/h a/x.txt",
		"fifo a/p",
		`file "a/with space" text`,
		"file a/x.txt rewritten",
	)
	type want struct {
		mode    fs.FileMode
		content string
	}
	for p, w := range map[string]want{
		"a/b":          {fs.ModeDir | 0o755, ""},
		"a/x.txt":      {0o644, "rewritten"},
		"a/h":          {0o644, "rewritten"},
		"bin/run":      {0o755, "#!/bin/sh"},
		"a/up":         {fs.ModeSymlink, "../.."},
		"a/abs":        {fs.ModeSymlink, root + "/a/b"},
		"a/p":          {fs.ModeNamedPipe | 0o644, ""},
		"a/with space": {0o644, "text"},
	} {
		full := filepath.Join(root, p)
		fi, err := os.Lstat(full)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		got := fi.Mode()
		if got.Type() == fs.ModeSymlink {
			got = fs.ModeSymlink
		}
		var content string
		switch {
		case got == fs.ModeSymlink:
			content, err = os.Readlink(full)
		case got.IsRegular():
			var b []byte
			b, err = os.ReadFile(full)
			content = string(b)
		}
		if err != nil || got != w.mode || content != w.content {
			t.Errorf("%s: mode %v content %q (%v); want %v %q", p, got, content, err, w.mode, w.content)
		}
	}
	a, errA := os.Stat(filepath.Join(root, "a/x.txt"))
	h, errH := os.Stat(filepath.Join(root, "a/h"))
	if errA != nil || errH != nil || !os.SameFile(a, h) {
		t.Errorf("a/h is not a hard link of a/x.txt: %v %v", errA, errH)
	}
}

// TestListReadsBackWhatBuildMade: List gives every entry with its mode, in order, and
// Build makes the same tree again from what List gives.
func TestListReadsBackWhatBuildMade(t *testing.T) {
	root := filepath.Join(t.TempDir(), "one")
	Build(t, root,
		"file:0600 z/secret s",
		"dir:0700 private",
		"file:4755 bin/suid #!/bin/sh",
		`file "a b/c\td" two`+"\nlines\n",
		"file empty",
		"symlink l ../elsewhere",
		"fifo p",
		"dir:0755 .",
	)
	want := []string{
		"dir:0755 .",
		`dir:0755 "a b"`,
		`file:0644 "a b/c\td" two` + "\nlines\n",
		"dir:0755 bin",
		"file:4755 bin/suid #!/bin/sh",
		"file:0644 empty ",
		"symlink l ../elsewhere",
		"fifo:0644 p",
		"dir:0700 private",
		"dir:0755 z",
		"file:0600 z/secret s",
	}
	got := List(t, root)
	if !slices.Equal(got, want) {
		t.Fatalf("List:\n%q\nwant\n%q", got, want)
	}
	again := filepath.Join(t.TempDir(), "two")
	Build(t, again, got...)
	if got := List(t, again); !slices.Equal(got, want) {
		t.Fatalf("List of the tree built from List:\n%q\nwant\n%q", got, want)
	}
}
