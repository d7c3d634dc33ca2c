// Package testtree builds the file trees of tests from short specs: a test's tree is
// data, one entry a spec, in one dialect for every package.
//
//	testtree.Build(t, dir,
//		"dir a/b",                    // a directory, mode 0755
//		"file a/x.txt one\ntwo\n",    // a regular file, mode 0644, and its content
//		"file a/empty",               // an empty file
//		"file:0755 bin/run #!/bin/sh", // a mode, on any kind but a link
//		"symlink a/up ../..",         // a symbolic link and its target, as written
//		"symlink a/abs $ROOT/a/b",    // $ROOT in a link's target is dir
//		"hardlink a/h a/x.txt",       // a hard link to a path below dir (or absolute)
//		"fifo a/p",                   // a named pipe, mode 0644
//		`file "a/with space" text`,   // a path Go-quoted
//	)
//
// A spec is KIND[:MODE] PATH [REST]. PATH is slash-separated and relative to the tree's
// root (no "..", not absolute); a trailing slash is allowed. It is written Go-quoted
// (strconv.Quote) when it holds white space or starts with a double quote, and may
// always be. REST, everything after the one space that ends PATH, is a file's content or a
// link's target (with "$ROOT" replaced); a file without REST is empty. MODE is octal
// (0755, 0600, 4755) and is set exactly, whatever the umask. Parent directories are made
// as needed (0755 less the umask).
//
// Parse reads a spec without touching the disk, for tests that build an in-memory model
// of a tree (workspaces' Listing) from the same specs. List reads a tree back as specs,
// with their modes, for a test that checks a tree did not change:
//
//	before := testtree.List(t, outside)
//	... // what must leave outside alone
//	if after := testtree.List(t, outside); !slices.Equal(after, before) {
//		t.Errorf("outside changed:\n%q\nwas\n%q", after, before)
//	}
package testtree

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Kind is what an entry is: the first word of its spec.
type Kind string

// The kinds of entry a spec can make.
const (
	File     Kind = "file"
	Dir      Kind = "dir"
	Symlink  Kind = "symlink"
	Hardlink Kind = "hardlink"
	FIFO     Kind = "fifo"
)

// Entry is one spec, parsed.
type Entry struct {
	Kind Kind
	// Path is slash-separated, relative to the tree's root, and clean (path.Clean).
	Path string
	// Mode is the spec's MODE (its setuid, setgid and sticky bits as fs.ModeSetuid,
	// fs.ModeSetgid and fs.ModeSticky), else 0644 for a file or a FIFO and 0755 for a
	// directory; 0 for a link.
	Mode fs.FileMode
	// Content is a file's bytes or a link's target as written (with "$ROOT" in it).
	Content string
}

// TB is what Build needs of a *testing.T, a *testing.B or a *rapid.T.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Parse reads one spec. A spec it cannot read is an error that quotes it.
func Parse(spec string) (Entry, error) {
	bad := func(why string) (Entry, error) {
		return Entry{}, fmt.Errorf("parse tree spec %q: %s", spec, why)
	}
	word, rest, _ := strings.Cut(spec, " ")
	kindWord, modeWord, hasMode := strings.Cut(word, ":")
	e := Entry{Kind: Kind(kindWord)}
	switch e.Kind {
	case File, FIFO:
		e.Mode = 0o644
	case Dir:
		e.Mode = 0o755
	case Symlink, Hardlink:
		if hasMode {
			return bad("a link has no mode")
		}
	default:
		return bad("the kind is not file, dir, symlink, hardlink or fifo")
	}
	if hasMode {
		m, err := strconv.ParseUint(modeWord, 8, 32)
		if err != nil || m > 0o7777 {
			return bad("the mode is not octal permission bits")
		}
		e.Mode = fs.FileMode(m & 0o777)
		for _, s := range specialBits {
			if uint32(m)&s.unix != 0 {
				e.Mode |= s.mode
			}
		}
	}
	p := rest
	if strings.HasPrefix(rest, `"`) {
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return bad("the quoted path does not end")
		}
		p, _ = strconv.Unquote(q)
		rest = rest[len(q):]
		if rest != "" && rest[0] != ' ' {
			return bad("no space after the quoted path")
		}
		rest = strings.TrimPrefix(rest, " ")
	} else {
		p, rest, _ = strings.Cut(rest, " ")
	}
	if p == "" || !filepath.IsLocal(filepath.FromSlash(p)) {
		return bad("the path is empty, absolute or leaves the root")
	}
	e.Path, e.Content = path.Clean(p), rest
	if strings.HasSuffix(p, "/") && e.Kind != Dir {
		return bad("a trailing slash on something not a directory")
	}
	switch e.Kind {
	case Dir, FIFO:
		if rest != "" {
			return bad("text after the path of a " + string(e.Kind))
		}
	case Symlink, Hardlink:
		if rest == "" {
			return bad("a link without a target")
		}
	}
	return e, nil
}

// Build makes the entries of specs under root, in order (root is made if missing). A
// file spec for a path that exists rewrites that file; any other existing path, or a spec
// Parse refuses, fails t.
func Build(t TB, root string, specs ...string) {
	t.Helper()
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatalf("build tree: %v", err)
	}
	for _, spec := range specs {
		e, err := Parse(spec)
		if err != nil {
			t.Fatalf("%v", err)
		}
		if err := write(root, e); err != nil {
			t.Fatalf("build tree spec %q: %v", spec, err)
		}
	}
}

// write makes e under root.
func write(root string, e Entry) error {
	p := filepath.Join(root, filepath.FromSlash(e.Path))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	target := strings.ReplaceAll(e.Content, "$ROOT", root)
	switch e.Kind {
	case File:
		if err := os.WriteFile(p, []byte(e.Content), e.Mode); err != nil {
			return err
		}
	case Dir:
		if err := os.MkdirAll(p, e.Mode); err != nil {
			return err
		}
	case FIFO:
		if err := unix.Mkfifo(p, uint32(e.Mode.Perm())); err != nil {
			return fmt.Errorf("mkfifo %s: %w", p, err)
		}
	case Symlink:
		return os.Symlink(target, p)
	case Hardlink:
		if !filepath.IsAbs(target) {
			target = filepath.Join(root, filepath.FromSlash(target))
		}
		return os.Link(target, p)
	}
	return os.Chmod(p, e.Mode)
}

// List reads the tree under root (root included, as ".") as specs in lexical order of
// their paths, each with its mode: "dir:0755 .", "file:0644 a/x.txt content",
// "symlink a/l target", "fifo:0644 a/p". Build makes the same tree again from them (hard
// links become copies); a socket or a device, which no spec makes, is listed as
// "other:MODE PATH". A tree it cannot read fails t.
func List(t TB, root string) []string {
	t.Helper()
	var specs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		name := quotePath(filepath.ToSlash(rel))
		mode := fmt.Sprintf(":%04o", unixMode(info.Mode()))
		switch info.Mode().Type() {
		case 0:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			specs = append(specs, "file"+mode+" "+name+" "+string(b))
		case fs.ModeDir:
			specs = append(specs, "dir"+mode+" "+name)
		case fs.ModeSymlink:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			specs = append(specs, "symlink "+name+" "+target)
		case fs.ModeNamedPipe:
			specs = append(specs, "fifo"+mode+" "+name)
		default:
			specs = append(specs, "other"+mode+" "+name)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("list tree %s: %v", root, err)
	}
	return specs
}

// quotePath writes p as a spec's PATH: Go-quoted when it must be.
func quotePath(p string) string {
	if p == "" || strings.HasPrefix(p, `"`) || strings.ContainsAny(p, " \t\n\r\v\f") {
		return strconv.Quote(p)
	}
	return p
}

// specialBits are the bits of a spec's MODE above the permission bits, and the
// fs.FileMode bits they stand for.
var specialBits = [...]struct {
	unix uint32
	mode fs.FileMode
}{{0o4000, fs.ModeSetuid}, {0o2000, fs.ModeSetgid}, {0o1000, fs.ModeSticky}}

// unixMode is m's permission, setuid, setgid and sticky bits as the octal a spec's MODE
// writes.
func unixMode(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	for _, s := range specialBits {
		if m&s.mode != 0 {
			u |= s.unix
		}
	}
	return u
}
