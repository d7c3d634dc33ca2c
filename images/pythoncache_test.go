package images

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/testneed"
)

// fakePython is an interpreter stand-in that counts its runs: bin/python3 is a script
// that appends a line to runs and names exe (a copy of /bin/true) as its sys.executable.
type fakePython struct {
	dir, bin, shim, exe, runs string
}

func newFakePython(t *testing.T) *fakePython {
	t.Helper()
	dir := t.TempDir()
	f := &fakePython{dir: dir, bin: filepath.Join(dir, "bin"), exe: filepath.Join(dir, "real", "python3.12"), runs: filepath.Join(dir, "runs")}
	f.shim = filepath.Join(f.bin, "python3")
	for _, d := range []string{f.bin, filepath.Dir(f.exe)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	f.writeShim(t, "")
	f.writeExe(t)
	return f
}

func (f *fakePython) writeShim(t *testing.T, extra string) {
	t.Helper()
	writeScript(t, f.bin, "python3", "echo run >> '"+f.runs+"'\necho '"+f.exe+"'; echo 3.12.1"+extra)
}

// writeExe puts a fresh copy of /bin/true at f.exe (a new inode each time).
func (f *fakePython) writeExe(t *testing.T) {
	t.Helper()
	src, err := os.Open("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	tmp := f.exe + ".new"
	dst, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o700)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, f.exe); err != nil {
		t.Fatal(err)
	}
}

// count is how often the fake interpreter ran.
func (f *fakePython) count(t *testing.T) int {
	t.Helper()
	data, err := os.ReadFile(f.runs)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), "\n")
}

// resolve resolves name through c and checks the answer is the fake's interpreter.
func (f *fakePython) resolve(t *testing.T, c PythonCache, name string) PythonResult {
	t.Helper()
	res, err := c.Resolve(context.Background(), name)
	if err != nil || res.Path != f.exe {
		t.Fatalf("resolve %s: %+v, %v; want %s", name, res, err, f.exe)
	}
	return res
}

// isolate gives the test a PATH of the fake's bin, a HOME of its own and a working
// directory of its own, with no shim variables set.
func isolate(t *testing.T, f *fakePython) {
	t.Helper()
	t.Setenv("PATH", f.bin)
	t.Setenv("HOME", filepath.Join(f.dir, "home"))
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PYENV") || k == "VIRTUAL_ENV" {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	wd := filepath.Join(f.dir, "wd", "project")
	if err := os.MkdirAll(wd, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Chdir(wd)
}

func TestPythonCacheAsksTheInterpreterOnceWhileNothingChanged(t *testing.T) {
	f := newFakePython(t)
	isolate(t, f)
	c := PythonCache{Dir: filepath.Join(f.dir, "cache", "python")}
	for _, name := range []string{"python3", f.shim} {
		if res := f.resolve(t, c, name); res.Cached {
			t.Errorf("first resolve of %s came from the cache", name)
		}
		for range 3 {
			if res := f.resolve(t, c, name); !res.Cached {
				t.Errorf("resolve of %s again: not from the cache", name)
			}
		}
	}
	if n := f.count(t); n != 2 {
		t.Errorf("the interpreter ran %d times for two names, want 2", n)
	}
	st, err := os.Stat(c.Dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("cache dir: %v, %v; want mode 0700", st, err)
	}
	entries, _ := os.ReadDir(c.Dir)
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || info.Mode() != 0o600 || strings.HasPrefix(e.Name(), ".") {
			t.Errorf("entry %s: %v, %v; want a regular file of mode 0600", e.Name(), info.Mode(), err)
		}
	}
}

func TestPythonCacheAsksAgainWhenWhatChoseTheInterpreterChanged(t *testing.T) {
	for name, change := range map[string]func(t *testing.T, f *fakePython){
		"the shim is rewritten": func(t *testing.T, f *fakePython) { f.writeShim(t, "\n: another line") },
		"the shim's mtime moves": func(t *testing.T, f *fakePython) {
			if err := os.Chtimes(f.shim, time.Now(), time.Now().Add(-time.Hour)); err != nil {
				t.Fatal(err)
			}
		},
		"the shim is replaced by a copy": func(t *testing.T, f *fakePython) {
			data, _ := os.ReadFile(f.shim)
			st, _ := os.Stat(f.shim)
			os.WriteFile(f.shim+".new", data, 0o700)
			os.Chtimes(f.shim+".new", st.ModTime(), st.ModTime())
			if err := os.Rename(f.shim+".new", f.shim); err != nil {
				t.Fatal(err)
			}
		},
		"the interpreter found is replaced":  func(t *testing.T, f *fakePython) { f.writeExe(t) },
		"PATH changes":                       func(t *testing.T, f *fakePython) { t.Setenv("PATH", f.bin+":/nonexistent") },
		"PYENV_VERSION is set":               func(t *testing.T, f *fakePython) { t.Setenv("PYENV_VERSION", "3.12") },
		"VIRTUAL_ENV is set":                 func(t *testing.T, f *fakePython) { t.Setenv("VIRTUAL_ENV", "/venv") },
		"HOME changes":                       func(t *testing.T, f *fakePython) { t.Setenv("HOME", "/elsewhere") },
		".python-version appears here":       func(t *testing.T, f *fakePython) { os.WriteFile(".python-version", []byte("3.12\n"), 0o600) },
		".python-version appears a level up": func(t *testing.T, f *fakePython) { os.WriteFile("../.python-version", []byte("3.12\n"), 0o600) },
		".tool-versions appears here":        func(t *testing.T, f *fakePython) { os.WriteFile(".tool-versions", []byte("python 3.12\n"), 0o600) },
		"the pyenv global version is set": func(t *testing.T, f *fakePython) {
			os.MkdirAll(filepath.Join(f.dir, "home", ".pyenv"), 0o700)
			os.WriteFile(filepath.Join(f.dir, "home", ".pyenv", "version"), []byte("3.12\n"), 0o600)
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakePython(t)
			isolate(t, f)
			c := PythonCache{Dir: filepath.Join(f.dir, "cache")}
			f.resolve(t, c, "python3")
			f.resolve(t, c, "python3")
			change(t, f)
			if res := f.resolve(t, c, "python3"); res.Cached {
				t.Errorf("after the change: from the cache")
			}
			if res := f.resolve(t, c, "python3"); !res.Cached {
				t.Errorf("after the change, again: not from the cache")
			}
			if n := f.count(t); n != 2 {
				t.Errorf("the interpreter ran %d times, want 2", n)
			}
		})
	}
}

// entryPath returns the one entry in dir.
func entryPath(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Fatalf("cache %s: %v, %v; want one entry", dir, entries, err)
	}
	return filepath.Join(dir, entries[0].Name())
}

func TestPythonCacheIgnoresEntriesAnotherUserCouldHaveWritten(t *testing.T) {
	for name, spoil := range map[string]func(t *testing.T, dir string){
		"the entry is readable by others": func(t *testing.T, dir string) { os.Chmod(entryPath(t, dir), 0o640) },
		"the entry is writable by others": func(t *testing.T, dir string) { os.Chmod(entryPath(t, dir), 0o602) },
		"the entry is a symlink to a good entry": func(t *testing.T, dir string) {
			p := entryPath(t, dir)
			os.Rename(p, filepath.Join(filepath.Dir(dir), "elsewhere"))
			if err := os.Symlink(filepath.Join(filepath.Dir(dir), "elsewhere"), p); err != nil {
				t.Fatal(err)
			}
		},
		"the directory is open to group and others": func(t *testing.T, dir string) { os.Chmod(dir, 0o755) },
		"the directory is a symlink to a good one": func(t *testing.T, dir string) {
			os.Rename(dir, dir+".real")
			if err := os.Symlink(dir+".real", dir); err != nil {
				t.Fatal(err)
			}
		},
		"the entry names another interpreter": func(t *testing.T, dir string) {
			p := entryPath(t, dir)
			data, _ := os.ReadFile(p)
			os.WriteFile(p, []byte(strings.Replace(string(data), `"exe":"`, `"exe":"/bin/sh`, 1)), 0o600)
		},
		"the entry is garbage": func(t *testing.T, dir string) { os.WriteFile(entryPath(t, dir), []byte("{"), 0o600) },
		"the entry is too large": func(t *testing.T, dir string) {
			os.WriteFile(entryPath(t, dir), []byte(strings.Repeat(" ", maxPythonEntry+1)), 0o600)
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakePython(t)
			isolate(t, f)
			c := PythonCache{Dir: filepath.Join(f.dir, "cache", "python")}
			f.resolve(t, c, "python3")
			spoil(t, c.Dir)
			if res := f.resolve(t, c, "python3"); res.Cached {
				t.Errorf("a spoilt entry was used")
			}
			if n := f.count(t); n != 2 {
				t.Errorf("the interpreter ran %d times, want 2", n)
			}
		})
	}
	t.Run("the entry belongs to another user", func(t *testing.T) {
		testneed.Root(t)
		f := newFakePython(t)
		isolate(t, f)
		c := PythonCache{Dir: filepath.Join(f.dir, "cache", "python")}
		f.resolve(t, c, "python3")
		if err := os.Lchown(entryPath(t, c.Dir), 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if res := f.resolve(t, c, "python3"); res.Cached {
			t.Errorf("another user's entry was used")
		}
	})
}

func TestPythonCacheInAnOpenDirectoryIsNeverWritten(t *testing.T) {
	f := newFakePython(t)
	isolate(t, f)
	c := PythonCache{Dir: filepath.Join(f.dir, "open")}
	if err := os.Mkdir(c.Dir, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(c.Dir, 0o777)
	for range 3 {
		if res := f.resolve(t, c, "python3"); res.Cached {
			t.Fatal("resolved from an open directory")
		}
	}
	if entries, _ := os.ReadDir(c.Dir); len(entries) != 0 || f.count(t) != 3 {
		t.Errorf("open cache dir holds %v; the interpreter ran %d times, want 3", entries, f.count(t))
	}
}

func TestPythonCacheKeepsNoFailure(t *testing.T) {
	f := newFakePython(t)
	isolate(t, f)
	writeScript(t, f.bin, "python3", "echo run >> '"+f.runs+"'\necho /bin/sh; echo 3.8.10")
	c := PythonCache{Dir: filepath.Join(f.dir, "cache")}
	for range 2 {
		_, err := c.Resolve(context.Background(), "python3")
		var pe *PythonError
		if !errors.As(err, &pe) || pe.Name != "python3" || !strings.Contains(pe.Reason, "3.8.10") {
			t.Fatalf("err = %v, want a PythonError for python3 naming 3.8.10", err)
		}
	}
	if _, err := (PythonCache{Dir: c.Dir}).Resolve(context.Background(), "kennel-no-such-python"); !errors.Is(err, ErrNoPython) {
		t.Errorf("missing interpreter: %v", err)
	}
	if n := f.count(t); n != 2 {
		t.Errorf("the interpreter ran %d times, want 2", n)
	}
}

func TestPythonCacheResolvesTheRealInterpreter(t *testing.T) {
	p := needPython(t)
	c := PythonCache{Dir: filepath.Join(t.TempDir(), "python")}
	for i := range 2 {
		res, err := c.Resolve(context.Background(), "python3")
		if err != nil || res.Path != p || res.Cached != (i == 1) {
			t.Fatalf("resolve %d: %+v, %v; want %s", i, res, err, p)
		}
	}
}

// BenchmarkPythonCacheHit times a resolution of python3 (on this machine often a pyenv
// shim) answered from the cache: PATH lookup, the key's stats, one entry read.
func BenchmarkPythonCacheHit(b *testing.B) {
	needPython(b)
	c := PythonCache{Dir: filepath.Join(b.TempDir(), "python")}
	if _, err := c.Resolve(context.Background(), "python3"); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if res, err := c.Resolve(context.Background(), "python3"); err != nil || !res.Cached {
			b.Fatalf("%+v, %v", res, err)
		}
	}
}
