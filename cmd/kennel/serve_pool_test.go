package main

import (
	"io"
	"maps"
	"path/filepath"
	"strings"
	"testing"

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
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "kubernetes pool") {
		t.Fatalf("serve --pool kubernetes=1 with no cluster: %v, want a refusal naming the pool", err)
	}
}
