package main

import (
	"context"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/settings"
)

// TestPoolSizesTakeTheFlagsOverTheSetting: --pool KIND=N sets a kind's pool over the pool
// setting's; a flag that names no pool kind, or a size out of 0..64, is refused with the
// flag named.
func TestPoolSizesTakeTheFlagsOverTheSetting(t *testing.T) {
	got, err := poolSizes(settings.Pool{"docker": 2, "containerd": 1}, []string{"docker=4", "containerd=0"})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"docker": 4, "containerd": 0}; !maps.Equal(got, want) {
		t.Errorf("sizes %v, want %v", got, want)
	}
	for _, bad := range []string{"docker", "docker=", "docker=-1", "docker=65", "docker=two", "ssh=1", "=3"} {
		if _, err := poolSizes(nil, []string{bad}); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("--pool %q: %v, want a refusal naming it", bad, err)
		}
	}
}

// TestServeWithAPoolItCannotKeepFails: --pool kubernetes=N with no cluster to reach
// fails the daemon's start, the pool named, instead of serving without it.
func TestServeWithAPoolItCannotKeepFails(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	cmd := newServeCmd()
	cmd.SetArgs([]string{"--pool", "kubernetes=1", "--socket", filepath.Join(t.TempDir(), "k.sock"), "--state", t.TempDir()})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "pool") {
		t.Fatalf("serve --pool kubernetes=1 with no cluster: %v, want a refusal naming the pool", err)
	}
}

// TestServeWithAPoolFailsClosedForANonRootDaemon: kennel serve --pool run by another
// user than root (uid 65534) does not start, saying a pool needs root, rather than serve
// without its pool.
func TestServeWithAPoolFailsClosedForANonRootDaemon(t *testing.T) {
	testneed.Root(t) // to run the daemon as uid 65534
	dir, err := os.MkdirTemp("", "kennel-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "kennel")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, pool := range []string{"docker=1", "containerd=1", "kubernetes=1"} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, bin, "serve", "--pool", pool, "--socket", filepath.Join(home, "k.sock"), "--state", filepath.Join(home, "state"))
		cmd.Dir = home
		cmd.Env = []string{envRunMain + "=1", "HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, "config"), "XDG_CACHE_HOME=" + filepath.Join(home, "cache"), "PATH=/usr/bin:/bin"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), "needs a daemon running as root") {
			t.Errorf("serve --pool %s as uid 65534: %v: %s; want a refusal saying a pool needs root", pool, err, out)
		}
		if _, err := os.Stat(filepath.Join(home, "k.sock")); err == nil {
			t.Errorf("serve --pool %s as uid 65534 left its socket", pool)
		}
	}
}
