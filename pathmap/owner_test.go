package pathmap

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testtree"
)

func TestParseOwner(t *testing.T) {
	good := map[string]Owner{
		"65534:65534": {65534, 65534},
		"10001:10001": {10001, 10001},
		"0:0":         {0, 0},
		"1000:100":    {1000, 100},
	}
	for s, want := range good {
		if got, err := ParseOwner(s); err != nil || got != want {
			t.Errorf("ParseOwner(%q) = %v, %v; want %v", s, got, err, want)
		}
		if got := want.String(); got != s {
			t.Errorf("%#v.String() = %q; want %q", want, got, s)
		}
	}
	for _, s := range []string{"", "1000", "1000:", ":1000", "-1:0", "0:-1", "a:b", "kernel", "kernel:kernel",
		"4294967295:0", "0:4294967295", "1:2:3", " 1:2", "1:2 ", "+1:2", "0x10:2", "99999999999:1"} {
		if got, err := ParseOwner(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseOwner(%q) = %v, %v; want ErrInvalid", s, got, err)
		}
	}
}

func TestNewRefusesAnInvalidOwner(t *testing.T) {
	dir := tempDir(t)
	for _, o := range []Owner{{-1, 0}, {0, -1}, {1 << 32, 0}, {0, 1<<32 - 1}} {
		m, err := New(Config{Dir: dir, Owner: &o})
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("New with owner %v: %v; want ErrInvalid", o, err)
		}
		if m != nil {
			m.Close()
		}
	}
}

// ownerOf returns "uid:gid mode" of the entry p.
func ownerOf(t *testing.T, p string) string {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Lstat(p, &st))
	return fmt.Sprintf("%d:%d %o", st.Uid, st.Gid, st.Mode&0o7777)
}

// With an Owner, the files and directories WriteFile and Rename create belong to it; a
// replaced file keeps its own owner and mode, and existing directories are left alone.
func TestWriteFileGivesWhatItCreatesToTheOwner(t *testing.T) {
	testneed.Root(t) // to give files to another uid
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := tempDir(t)
	testtree.Build(t, dir, "file mine operator's", "file m/one 1", "dir d")
	must(t, os.Chown(dir+"/mine", 1234, 4321))
	must(t, os.Chmod(dir+"/mine", 0o640))
	m := newMap(t, Config{Dir: dir, Mounts: []Mount{{Sandbox: "/w", Host: dir}}, Owner: &Owner{65534, 65534}})
	write := func(p, content string) {
		t.Helper()
		tg, err := m.Resolve("/w", p)
		must(t, err)
		_, err = tg.WriteFile([]byte(content))
		must(t, err)
	}
	write("new/dir/f", "made")
	write("d/g", "in an existing directory")
	write("mine", "replaced")
	from, err := m.ResolveEntry("/w", "m/one")
	must(t, err)
	to, err := m.ResolveEntry("/w", "moved/here/one")
	must(t, err)
	must(t, Rename(from, to))
	want := map[string]string{
		"new":            "65534:65534 755",
		"new/dir":        "65534:65534 755",
		"new/dir/f":      "65534:65534 644",
		"d":              "0:0 755",
		"d/g":            "65534:65534 644",
		"mine":           "1234:4321 640", // a replaced file keeps its owner and mode
		"moved":          "65534:65534 755",
		"moved/here":     "65534:65534 755",
		"moved/here/one": "0:0 644", // a rename moves the inode as it is
		"m":              "0:0 755",
	}
	for p, w := range want {
		if got := ownerOf(t, dir+"/"+p); got != w {
			t.Errorf("%s is %s; want %s", p, got, w)
		}
	}
	if b, _ := os.ReadFile(dir + "/mine"); string(b) != "replaced" {
		t.Errorf("mine = %q", b)
	}
	noTemps(t, dir)
}

// Without an Owner, what WriteFile creates belongs to the controller, as before.
func TestWriteFileWithoutOwnerGivesNewFilesToTheController(t *testing.T) {
	dir := tempDir(t)
	m := newMap(t, Config{Dir: dir})
	tg, err := m.Resolve(dir, "a/b")
	must(t, err)
	_, err = tg.WriteFile([]byte("x"))
	must(t, err)
	self := fmt.Sprintf("%d:%d ", os.Geteuid(), os.Getegid())
	for _, p := range []string{"a", "a/b"} {
		if got := ownerOf(t, dir+"/"+p); !strings.HasPrefix(got, self) {
			t.Errorf("%s is %s; want the controller's %s", p, got, self)
		}
	}
}

// onThreadWithoutChown runs fn on an OS thread whose effective capabilities lack
// CAP_CHOWN: as root, that thread is what an unprivileged controller is to chown(2)
// (capabilities are per thread; the thread ends with fn, never reused).
func onThreadWithoutChown(t *testing.T, fn func() error) error {
	t.Helper()
	testneed.Root(t) // to drop CAP_CHOWN from a thread
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			done <- fmt.Errorf("capget: %w", err)
			return
		}
		data[0].Effective &^= 1 << unix.CAP_CHOWN
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			done <- fmt.Errorf("capset: %w", err)
			return
		}
		done <- fn()
	}()
	return <-done
}

// A controller that cannot chown refuses, when the Map is made, an Owner other than
// itself (fail closed: files would otherwise silently stay the controller's); its own
// uid:gid is fine.
func TestNewRefusesAnOwnerItCannotGiveFilesTo(t *testing.T) {
	dir := tempDir(t)
	err := onThreadWithoutChown(t, func() error {
		m, err := New(Config{Dir: dir, Owner: &Owner{65534, 65534}})
		if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "65534:65534") || !strings.Contains(err.Error(), "CAP_CHOWN") {
			if m != nil {
				m.Close()
			}
			return fmt.Errorf("New with owner 65534:65534 and no CAP_CHOWN: %v; want ErrDenied naming the owner and CAP_CHOWN", err)
		}
		self := Owner{os.Geteuid(), os.Getegid()}
		m, err = New(Config{Dir: dir, Owner: &self})
		if err != nil {
			return fmt.Errorf("New with the controller's own owner %v: %w", self, err)
		}
		defer m.Close()
		tg, err := m.Resolve(dir, "x/y")
		if err != nil {
			return err
		}
		_, err = tg.WriteFile([]byte("mine"))
		return err
	})
	must(t, err)
	if got := ownerOf(t, dir+"/x/y"); !strings.HasPrefix(got, "0:0 ") {
		t.Errorf("x/y is %s; want 0:0", got)
	}
}

// If the owner cannot be given at write time (the privilege was lost, an id the file
// system cannot store), the write fails with denied and leaves nothing behind: never a
// file with the wrong owner.
func TestWriteFileFailsClosedWhenTheChownFails(t *testing.T) {
	dir := tempDir(t)
	testtree.Build(t, dir, "file old old")
	m := newMap(t, Config{Dir: dir, Owner: &Owner{65534, 65534}})
	before := testtree.List(t, dir)
	err := onThreadWithoutChown(t, func() error {
		for _, p := range []string{"new", "a/b/new"} {
			tg, err := m.Resolve(dir, p)
			if err != nil {
				return err
			}
			if _, err := tg.WriteFile([]byte("x")); !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "65534:65534") {
				return fmt.Errorf("WriteFile(%q) unable to chown: %v; want ErrDenied naming the owner", p, err)
			}
		}
		return nil
	})
	must(t, err)
	if after := testtree.List(t, dir); !slices.Equal(after, before) {
		t.Fatalf("a failed write changed the tree:\n%q\nwas:\n%q", after, before)
	}
	noTemps(t, dir)
}

// A directory WriteFile made that is no longer empty when it is opened was swapped in by
// someone else after the mkdirat: it is not handed to the Owner.
func TestGiveDirRefusesADirectorySwappedIn(t *testing.T) {
	testneed.Root(t) // to give a directory to another uid
	dir := tempDir(t)
	testtree.Build(t, dir, "file swapped/theirs x", "dir fresh")
	for p, want := range map[string]error{"swapped": ErrChanged, "fresh": nil} {
		fd, err := unix.Open(dir+"/"+p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		must(t, err)
		err = giveDir(fd, Owner{65534, 65534})
		closeFd(fd)
		if err != want {
			t.Errorf("giveDir(%s) = %v; want %v", p, err, want)
		}
	}
	if got := ownerOf(t, dir+"/swapped"); !strings.HasPrefix(got, "0:0 ") {
		t.Errorf("the swapped-in directory was given away: %s", got)
	}
	if got := ownerOf(t, dir+"/fresh"); !strings.HasPrefix(got, "65534:65534 ") {
		t.Errorf("the fresh directory is %s; want 65534:65534", got)
	}
}
