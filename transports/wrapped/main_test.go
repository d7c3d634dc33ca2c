package wrapped_test

import (
	"os"
	"testing"

	"github.com/kennel-dev/kennel/internal/reaper"
)

// TestMain lets the test binary act as the local transport's reaper (the benchmark's
// baseline starts local kernels).
func TestMain(m *testing.M) {
	if reaper.Main() {
		return
	}
	os.Exit(m.Run())
}
