package main

import (
	"maps"
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
	for _, bad := range []string{"docker", "docker=", "docker=-1", "docker=65", "docker=two", "kubernetes=1", "=3"} {
		if _, err := poolSizes(nil, []string{bad}); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("--pool %q: %v, want a refusal naming it", bad, err)
		}
	}
}
