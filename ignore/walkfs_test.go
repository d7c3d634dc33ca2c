package ignore

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/fstest"
	"time"

	"github.com/kennel-dev/kennel/internal/testtree"
)

// A .gitignore of MaxFileSize bytes is read; one byte more and it counts as
// empty, unread, as git's dir.c decides (PATTERN_MAX_FILE_SIZE, 100 MiB:
// a pattern file of 100 MiB or more is skipped). Walk and WalkFS agree.
func TestWalkGitignoreSizeBound(t *testing.T) {
	dir := t.TempDir()
	testtree.Build(t, dir, "file read/.gitignore *\n", "file read/x", "file big/.gitignore *\n", "file big/x")
	// Holes: nothing is stored, a read yields NUL bytes, which end the
	// line they are on (so the files hold the one pattern "*").
	must(t, os.Truncate(filepath.Join(dir, "read", ".gitignore"), MaxFileSize))
	must(t, os.Truncate(filepath.Join(dir, "big", ".gitignore"), MaxFileSize+1))
	for _, w := range walkers {
		var got []string
		err := w.walk(context.Background(), dir, func(rel string, d fs.DirEntry) error {
			got = append(got, rel)
			return nil
		})
		if want := []string{"big", "big/.gitignore", "big/x", "read"}; err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: got %q, %v; want %q", w.name, got, err, want)
		}
	}
}

// WalkFS reads no more than MaxFileSize+1 bytes of a .gitignore, even when
// its Stat says it is small and it never ends; it then counts as empty.
func TestWalkFSBoundsWhatItReads(t *testing.T) {
	fsys := endlessIgnoreFS{MapFS: fstest.MapFS{
		".gitignore": {Data: []byte("x\n")},
		"x":          {},
	}}
	var read int64
	fsys.read = &read
	var got []string
	err := WalkFS(context.Background(), fsys, ".", func(rel string, d fs.DirEntry) error {
		got = append(got, rel)
		return nil
	})
	if want := []string{".gitignore", "x"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("got %q, %v; want %q", got, err, want)
	}
	if read > MaxFileSize+1 {
		t.Errorf("read %d bytes of the .gitignore, want at most MaxFileSize+1 = %d", read, MaxFileSize+1)
	}
}

// endlessIgnoreFS is a MapFS whose .gitignore, once opened, reports its
// MapFS size but reads "x\n" forever, counting the bytes read.
type endlessIgnoreFS struct {
	fstest.MapFS
	read *int64
}

func (f endlessIgnoreFS) Open(name string) (fs.File, error) {
	file, err := f.MapFS.Open(name)
	if err != nil || name != ".gitignore" {
		return file, err
	}
	return endlessFile{File: file, read: f.read}, nil
}

type endlessFile struct {
	fs.File
	read *int64
}

func (f endlessFile) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = "x\n"[i%2]
	}
	*f.read += int64(len(p))
	return len(p), nil
}

var _ io.Reader = endlessFile{}

// WalkFS over a tree that is no local directory (fstest.MapFS): the rules
// apply as on disk, and a .gitignore that is a directory or a symlink has
// none.
func TestWalkFSOverMapFS(t *testing.T) {
	fsys := fstest.MapFS{
		".gitignore":         {Data: []byte("*.log\n!keep.log\nbuild/\n")},
		"a.log":              {},
		"keep.log":           {},
		"build/x":            {},
		"src/.gitignore":     {Data: []byte("!a.log\n")},
		"src/a.log":          {},
		"src/b.log":          {},
		"dir/.gitignore/f":   {},
		"dir/y.log":          {},
		"link/.gitignore":    {Data: []byte("../.gitignore"), Mode: fs.ModeSymlink},
		"link/z":             {},
		"deep/a/b/c/d.log":   {},
		"deep/a/b/c/keep.md": {},
		".git/config":        {},
	}
	var got []string
	err := WalkFS(context.Background(), fsys, ".", func(rel string, d fs.DirEntry) error {
		if !d.IsDir() {
			got = append(got, rel)
		}
		return nil
	})
	want := []string{".gitignore", "deep/a/b/c/keep.md", "dir/.gitignore/f", "keep.log", "link/.gitignore", "link/z",
		"src/.gitignore", "src/a.log"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("got %q, %v\nwant %q", got, err, want)
	}

	// From a subdirectory: rel is relative to it, and only the .gitignore
	// files at or below it count.
	got = nil
	err = WalkFS(context.Background(), fsys, "src", func(rel string, d fs.DirEntry) error {
		got = append(got, rel)
		return nil
	})
	if want := []string{".gitignore", "a.log", "b.log"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("from src: got %q, %v; want %q", got, err, want)
	}
}

// A WalkFS over a deep MapFS ends with ErrTooDeep, as Walk does.
func TestWalkFSTooDeep(t *testing.T) {
	p := "f"
	for range MaxDepth + 1 {
		p = "d/" + p
	}
	err := WalkFS(context.Background(), fstest.MapFS{p: {}}, ".", func(string, fs.DirEntry) error { return nil })
	if !errors.Is(err, ErrTooDeep) {
		t.Fatalf("err = %v, want ErrTooDeep", err)
	}
}

// A WalkFS whose fsys blocks in ReadDir still ends when ctx ends between
// directories: a bounded wait, not a hang, for a source that honours no
// context (the ssh FS's own adapter cancels its listing with the walk's
// context).
func TestWalkFSContextBetweenDirectories(t *testing.T) {
	fsys := fstest.MapFS{"a/1": {}, "b/1": {}}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := WalkFS(ctx, slowFS{fsys, 100 * time.Millisecond}, ".", func(string, fs.DirEntry) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("ended after %v", d)
	}
}

// slowFS sleeps before each ReadDir.
type slowFS struct {
	fstest.MapFS
	delay time.Duration
}

func (f slowFS) ReadDir(name string) ([]fs.DirEntry, error) {
	time.Sleep(f.delay)
	return f.MapFS.ReadDir(name)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
