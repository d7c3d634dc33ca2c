package images

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"pgregory.net/rapid"
)

func TestStubHashIsStable(t *testing.T) {
	a, err := Stub()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Stub()
	if err != nil {
		t.Fatal(err)
	}
	if a.Hash() != b.Hash() || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(a.Hash()) {
		t.Errorf("hashes %q, %q", a.Hash(), b.Hash())
	}
	if got := hashFiles(a.Files()); got != a.Hash() {
		t.Errorf("hash of Files() = %s, want %s", got, a.Hash())
	}
	paths := map[string]bool{}
	for _, f := range a.Files() {
		paths[f.Path] = true
		if strings.Contains(f.Path, "__pycache__") || strings.HasSuffix(f.Path, ".pyc") {
			t.Errorf("bundle holds %s", f.Path)
		}
		src, err := os.ReadFile(filepath.Join("kernel", filepath.FromSlash(f.Path)))
		if err != nil || !bytes.Equal(src, f.Data) {
			t.Errorf("%s differs from the source tree (%v)", f.Path, err)
		}
	}
	for _, want := range []string{"kennel/__init__.py", "kennel/_boot.py", "kennel/_kernel.py", "kennel/fs.py"} {
		if !paths[want] {
			t.Errorf("bundle lacks %s", want)
		}
	}
}

func genFiles() *rapid.Generator[[]File] {
	return rapid.Custom(func(t *rapid.T) []File {
		names := rapid.SliceOfNDistinct(rapid.StringMatching(`[a-z_é]{1,6}(/[a-z_.]{1,6}\.py)?`), 0, 8, rapid.ID[string]).Draw(t, "names")
		var files []File
		seen := map[string]bool{}
		for _, n := range names {
			seen[n] = true
		}
		for _, n := range names {
			if dir := filepath.Dir(n); dir != "." && seen[dir] {
				continue // a file cannot also be a directory
			}
			files = append(files, File{Path: n, Data: rapid.SliceOfN(rapid.Byte(), 0, 64).Draw(t, "data")})
		}
		return files
	})
}

func TestHashProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		files := genFiles().Draw(t, "files")
		b, err := NewBundle(files)
		if err != nil {
			t.Fatal(err)
		}
		// Order of the input does not matter.
		shuffled := rapid.Permutation(files).Draw(t, "shuffled")
		b2, err := NewBundle(shuffled)
		if err != nil || b2.Hash() != b.Hash() {
			t.Fatalf("permuted: %v %s != %s", err, b2.Hash(), b.Hash())
		}
		if len(files) == 0 {
			return
		}
		// Any change of one content, or a byte moved between a path and its content,
		// changes the hash.
		i := rapid.IntRange(0, len(files)-1).Draw(t, "i")
		changed := append([]File(nil), files...)
		changed[i] = File{Path: files[i].Path, Data: append(append([]byte(nil), files[i].Data...), 'x')}
		if b3, _ := NewBundle(changed); b3.Hash() == b.Hash() {
			t.Fatal("content change kept the hash")
		}
		moved := append([]File(nil), files...)
		moved[i] = File{Path: files[i].Path + "x", Data: files[i].Data}
		if b4, err := NewBundle(moved); err == nil && b4.Hash() == b.Hash() {
			t.Fatal("path change kept the hash")
		}
		// NewBundle copies its input.
		if len(files[i].Data) > 0 {
			files[i].Data[0]++
			if b5, _ := NewBundle(b.Files()); b5.Hash() != b.Hash() {
				t.Fatal("bundle changed with its input slice")
			}
		}
	})
}

func TestNewBundleRejectsBadPaths(t *testing.T) {
	for _, p := range []string{"", ".", "/abs", "../x", "a/../b", "a//b", "a/", "./a", `a\b`, "a\x00b"} {
		_, err := NewBundle([]File{{Path: p}})
		if !errors.Is(err, ErrBadPath) {
			t.Errorf("path %q: err = %v, want ErrBadPath", p, err)
		}
	}
	if _, err := NewBundle([]File{{Path: "a"}, {Path: "a"}}); !errors.Is(err, ErrBadPath) {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := NewBundle([]File{{Path: "a"}, {Path: "a/b"}}); !errors.Is(err, ErrBadPath) {
		t.Errorf("file under file: %v", err)
	}
}

// checkTree checks dir holds exactly b's files with mode 0600 in dirs of mode 0700.
func checkTree(t testing.TB, b *Bundle, dir string) {
	t.Helper()
	want := map[string][]byte{}
	for _, f := range b.Files() {
		want[f.Path] = f.Data
	}
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if info.IsDir() {
			if info.Name() == "__pycache__" {
				return filepath.SkipDir // written by Python when it runs the stub
			}
			if info.Mode().Perm() != 0o700 {
				t.Errorf("dir %s mode %o, want 0700", rel, info.Mode().Perm())
			}
			return nil
		}
		data, ok := want[filepath.ToSlash(rel)]
		if !ok {
			t.Errorf("extra file %s", rel)
			return nil
		}
		delete(want, filepath.ToSlash(rel))
		if info.Mode().Perm() != 0o600 {
			t.Errorf("file %s mode %o, want 0600", rel, info.Mode().Perm())
		}
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("file %s content differs (%v)", rel, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := range want {
		t.Errorf("missing file %s", p)
	}
}

func TestUnpackModesAndContent(t *testing.T) {
	// With umask 0 a mode given at creation shows as it is: 0700 and 0600 exactly.
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	b, err := Stub()
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(t.TempDir(), "new", "bundles")
	dir, err := b.Unpack(cache)
	if err != nil {
		t.Fatal(err)
	}
	if dir != filepath.Join(cache, b.Hash()) {
		t.Errorf("dir = %s", dir)
	}
	for _, d := range []string{cache, filepath.Dir(cache)} {
		if info, err := os.Stat(d); err != nil || info.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v (%v), want 0700", d, info.Mode().Perm(), err)
		}
	}
	checkTree(t, b, dir)
}

func TestUnpackIsIdempotentAndReuses(t *testing.T) {
	b, err := NewBundle([]File{{Path: "kennel/a.py", Data: []byte("a")}, {Path: "top", Data: []byte("t")}})
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	dir1, err := b.Unpack(cache)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(filepath.Join(dir1, "top"))
	dir2, err := b.Unpack(cache)
	if err != nil || dir2 != dir1 {
		t.Fatalf("second unpack: %s, %v", dir2, err)
	}
	after, _ := os.Stat(filepath.Join(dir1, "top"))
	if !os.SameFile(before, after) {
		t.Error("second unpack rewrote the tree")
	}
	checkTree(t, b, dir1)
	entries, _ := os.ReadDir(cache)
	if len(entries) != 1 {
		t.Errorf("cache holds %d entries, want 1 (no temp dirs left)", len(entries))
	}
}

func TestUnpackConcurrent(t *testing.T) {
	b, err := Stub()
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	const n = 8
	dirs := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dirs[i], errs[i] = b.Unpack(cache)
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || dirs[i] != dirs[0] {
			t.Errorf("unpacker %d: %s, %v", i, dirs[i], errs[i])
		}
	}
	checkTree(t, b, dirs[0])
	entries, _ := os.ReadDir(cache)
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("cache holds %v, want only the bundle dir", names)
	}
}

func TestUnpackRefusesUnsafeCache(t *testing.T) {
	b, err := NewBundle([]File{{Path: "a", Data: []byte("a")}})
	if err != nil {
		t.Fatal(err)
	}
	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Unpack(open); !errors.Is(err, ErrUnsafeCache) {
		t.Errorf("world-writable cache: %v", err)
	}
	base := t.TempDir()
	link := filepath.Join(base, "link")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Unpack(link); !errors.Is(err, ErrUnsafeCache) {
		t.Errorf("symlinked cache: %v", err)
	}
	// An entry of the bundle's name that is not a directory is not reused.
	cache := t.TempDir()
	if err := os.WriteFile(filepath.Join(cache, b.Hash()), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Unpack(cache); !errors.Is(err, ErrUnsafeCache) {
		t.Errorf("file in place of the bundle dir: %v", err)
	}
	if _, err := b.Unpack(""); !errors.Is(err, ErrUnsafeCache) {
		t.Errorf("empty cache dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(open, b.Hash())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused unpack left %s behind", b.Hash())
	}
}

func TestDefaultCacheDir(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "/x/cache")
	if got, err := DefaultCacheDir(); err != nil || got != "/x/cache/kennel/bundles" {
		t.Errorf("with XDG_CACHE_HOME: %s, %v", got, err)
	}
	t.Setenv("HOME", "/home/u")
	t.Setenv("XDG_CACHE_HOME", "relative")
	if got, err := DefaultCacheDir(); err != nil || got != "/home/u/.cache/kennel/bundles" {
		t.Errorf("with a relative XDG_CACHE_HOME: %s, %v", got, err)
	}
	t.Setenv("XDG_CACHE_HOME", "")
	if got, err := DefaultCacheDir(); err != nil || got != "/home/u/.cache/kennel/bundles" {
		t.Errorf("without XDG_CACHE_HOME: %s, %v", got, err)
	}
}

func TestKernelArgvAndEnv(t *testing.T) {
	b, err := Stub()
	if err != nil {
		t.Fatal(err)
	}
	argv := KernelArgv("/usr/bin/python3", "/c/h")
	if len(argv) != 6 || argv[0] != "/usr/bin/python3" || argv[1] != "-I" || argv[2] != "-S" || argv[5] != "/c/h" {
		t.Errorf("argv = %q", argv)
	}
	env := KernelEnv(b)
	if env[0] != EnvBundle+"="+b.Hash() {
		t.Errorf("env = %q", env)
	}
}
