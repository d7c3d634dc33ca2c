package daemon_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"pgregory.net/rapid"

	"github.com/kennel-dev/kennel/daemon"
	"github.com/kennel-dev/kennel/internal/testneed"
)

func TestSocketDirOnRealPaths(t *testing.T) {
	for _, tc := range []struct {
		name  string
		make  func(t *testing.T, dir string) // makes dir (or not)
		fault daemon.Fault                   // "": accepted
		text  []string                       // the error names these
	}{
		{"missing: created 0700 and used", func(*testing.T, string) {}, "", nil},
		{"0700", mkdirMode(0o700), "", nil},
		{"0755: read and search only", mkdirMode(0o755), "", nil},
		{"0720: group write", mkdirMode(0o720), daemon.FaultMode, []string{"0720", "chmod go-w", "--socket"}},
		{"0777: everyone writes", mkdirMode(0o777), daemon.FaultMode, []string{"0777", "chmod go-w"}},
		{"0702: other write", mkdirMode(0o702), daemon.FaultMode, []string{"0702"}},
		{"a symlink to a private dir", func(t *testing.T, dir string) {
			target := dir + ".target"
			mkdirMode(0o700)(t, target)
			if err := os.Symlink(target, dir); err != nil {
				t.Fatal(err)
			}
		}, daemon.FaultSymlink, []string{"symlink", "remove the path"}},
		{"a file", func(t *testing.T, dir string) {
			if err := os.WriteFile(dir, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, daemon.FaultNotDir, []string{"not a directory", "remove the path"}},
		{"another owner", func(t *testing.T, dir string) {
			testneed.Root(t) // to chown a directory to uid 65534
			mkdirMode(0o700)(t, dir)
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, daemon.FaultOwner, []string{"uid 65534", "private directory of your own"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "a", "sock")
			if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
				t.Fatal(err)
			}
			if tc.name == "missing: created 0700 and used" {
				dir = filepath.Join(t.TempDir(), "p1", "p2", "sock")
			}
			tc.make(t, dir)
			before, _ := os.Lstat(dir)
			err := daemon.PrepareSocketDir(dir)
			if tc.fault == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				fi, err := os.Lstat(dir)
				if err != nil || !fi.IsDir() {
					t.Fatalf("not a directory after prepare: %v", err)
				}
				if before == nil {
					for d := dir; strings.Contains(d, "p1"); d = filepath.Dir(d) {
						if m := modeOf(t, d); m != 0o700 {
							t.Errorf("%s made with mode %#o, want 0700", d, m)
						}
					}
				} else if fi.Mode() != before.Mode() {
					t.Errorf("mode changed from %v to %v", before.Mode(), fi.Mode())
				}
				return
			}
			var de *daemon.SocketDirError
			if !errors.As(err, &de) || !errors.Is(err, daemon.ErrSocketDir) || de.Fault != tc.fault {
				t.Fatalf("got %v, want fault %q", err, tc.fault)
			}
			for _, want := range append(tc.text, dir) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
			if after, _ := os.Lstat(dir); after == nil || after.Mode() != before.Mode() {
				t.Errorf("a refused directory was changed")
			}
		})
	}
}

func mkdirMode(mode fs.FileMode) func(*testing.T, string) {
	return func(t *testing.T, dir string) {
		t.Helper()
		if err := os.Mkdir(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
	}
}

func modeOf(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// The verdict on any permission bits: used exactly when neither group nor other may
// write, whatever the other bits.
func TestSocketDirModeVerdictProperty(t *testing.T) {
	base := t.TempDir()
	rapid.Check(t, func(rt *rapid.T) {
		mode := fs.FileMode(rapid.IntRange(0, 0o777).Draw(rt, "mode")) | 0o700
		dir, err := os.MkdirTemp(base, "m")
		if err != nil {
			rt.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			rt.Fatal(err)
		}
		err = daemon.CheckSocketDir(dir)
		if ok := mode&0o022 == 0; ok != (err == nil) {
			rt.Fatalf("mode %#o: verdict %v", mode, err)
		}
		if err != nil && !strings.Contains(err.Error(), "chmod go-w") {
			rt.Fatalf("mode error without the fix: %v", err)
		}
	})
}

func TestPrepareSocketDirUnderAStrictOrOpenUmask(t *testing.T) {
	for _, mask := range []int{0, 0o022, 0o077, 0o777} {
		old := syscall.Umask(mask)
		dir := filepath.Join(t.TempDir(), "x", "y")
		err := daemon.PrepareSocketDir(dir)
		syscall.Umask(old)
		if err != nil {
			t.Fatalf("umask %#o: %v", mask, err)
		}
		for _, d := range []string{dir, filepath.Dir(dir)} {
			if m := modeOf(t, d); m != 0o700 {
				t.Errorf("umask %#o: %s has mode %#o, want 0700", mask, d, m)
			}
		}
	}
}

func TestStateDirIsSetPrivateAtEachStart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := daemon.PrepareStateDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := daemon.PrepareStateDir(dir); err != nil {
		t.Fatal(err)
	}
	if m := modeOf(t, dir); m != 0o700 {
		t.Fatalf("state dir mode %#o after a start, want 0700", m)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	err := daemon.PrepareStateDir(link)
	if !errors.Is(err, daemon.ErrSocketDir) || !strings.Contains(err.Error(), "state directory") {
		t.Fatalf("a symlinked state dir: %v", err)
	}
}

func TestDefaultSocket(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	uid := os.Geteuid()
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"XDG_RUNTIME_DIR": "/run/user/7", "TMPDIR": "/x"}, "/run/user/7/kennel/kennel.sock"},
		{map[string]string{"TMPDIR": "/var/tmp"}, "/var/tmp/kennel-" + strconv.Itoa(uid) + "/kennel.sock"},
		{map[string]string{}, "/tmp/kennel-" + strconv.Itoa(uid) + "/kennel.sock"},
		{map[string]string{"XDG_RUNTIME_DIR": "relative", "TMPDIR": "also"}, "/tmp/kennel-" + strconv.Itoa(uid) + "/kennel.sock"},
	} {
		if got := daemon.DefaultSocket(env(tc.env)); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.env, got, tc.want)
		}
	}
}
