package daemon_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/client"
	"github.com/kennel-dev/kennel/daemon"
	"github.com/kennel-dev/kennel/internal/procfs"
	"github.com/kennel-dev/kennel/internal/testproc"
)

// alive reports whether pid names a live (not zombie) process; a stat line that does not
// parse counts as alive.
func alive(pid int) bool {
	if testproc.Kill(pid, 0) != nil {
		return false
	}
	st, err := procfs.Read(pid)
	if errors.Is(err, procfs.ErrStat) {
		return true
	}
	return err == nil && !st.Zombie()
}

func TestShutdownEndsSessionsAndRemovesTheSocket(t *testing.T) {
	r := serve(t, daemon.Options{})
	ctx := context.Background()
	var pids []int
	for range 3 {
		s := r.newSession(t)
		j, err := r.c.RunJob(ctx, s.ID, "sleep 300")
		if err != nil {
			t.Fatal(err)
		}
		var got *api.Session
		for range 200 {
			got, _ = r.c.Session(ctx, s.ID)
			if len(got.Kernel.RunningJobs) == 1 && got.Kernel.RunningJobs[0].PID != nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if got.Kernel.PID == nil || len(got.Kernel.RunningJobs) != 1 || got.Kernel.RunningJobs[0].PID == nil {
			t.Fatalf("session %s: kernel %+v (job %s)", s.ID, got.Kernel, j.ID)
		}
		pids = append(pids, *got.Kernel.PID, *got.Kernel.RunningJobs[0].PID)
	}
	r.stop()
	if _, err := os.Lstat(r.socket); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket file left: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if alive(pid) {
			t.Errorf("pid %d outlived the shutdown", pid)
		}
	}
	if _, err := client.New(r.socket).Sessions(ctx); !errors.Is(err, client.ErrNoDaemon) {
		t.Fatalf("a call after shutdown: %v", err)
	}
}

// TestModesOfEverythingTheDaemonCreates starts a daemon in a fresh home under umask 0,
// runs a session whose job spills output, makes a child workspace, and checks the mode of
// every directory (0700) and file (0600) the daemon made, and the socket (0600). The
// child's copy of the parent's files keeps their modes and is left out.
func TestModesOfEverythingTheDaemonCreates(t *testing.T) {
	home := filepath.Join(shortDir(t), "home")
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	run := filepath.Join(home, "run", "kennel")
	state := filepath.Join(home, "state", "kennel")
	r := serve(t, daemon.Options{Socket: filepath.Join(run, "kennel.sock"), StateDir: state})
	ctx := context.Background()
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "f.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := r.c.CreateSession(ctx, api.CreateSession{Cwd: work}, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "import sys\nsys.stdout.write('y'*(2<<20))\n0"})
	if err != nil || rep.Cell == nil {
		t.Fatalf("cell: %v", err)
	}
	if _, err := r.c.CreateChild(ctx, s.ID, api.CreateChild{ID: "c1"}); err != nil {
		t.Fatal(err)
	}
	if m := modeOf(t, r.socket); m != 0o600 {
		t.Errorf("socket: %#o", m)
	}
	files := 0
	err = filepath.WalkDir(home, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(home, path)
		if d.IsDir() && d.Name() == "work" && strings.Contains(rel, "workspaces") {
			return filepath.SkipDir // the child's copy keeps the user's modes
		}
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			if fi.Mode().Perm() != 0o700 {
				t.Errorf("dir %s: %#o, want 0700", rel, fi.Mode().Perm())
			}
		case fi.Mode().Type() == fs.ModeSocket:
		case fi.Mode().IsRegular():
			files++
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("file %s: %#o, want 0600", rel, fi.Mode().Perm())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 3 {
		t.Fatalf("only %d files checked: the spill and the workspace records were expected", files)
	}
}
