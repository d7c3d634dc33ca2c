package local_test

import (
	"os"
	"testing"

	"github.com/kennel-dev/kennel/internal/reaper"
)

func TestMain(m *testing.M) {
	if reaper.Main() {
		return
	}
	if mode, ok := os.LookupEnv(helperEnv); ok {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}
