package reaper

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// envMarker is the environment variable that, together with argGuard as the first argument,
// puts a process in reaper mode. Its value is the config (see config.encode).
const envMarker = "KENNEL_REAPER"

// withoutMarker is a copy of env without the marker variable.
func withoutMarker(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, envMarker+"=") })
}

// argGuard is the reaper's first argument. A binary that does not call Main fails on it as
// an unknown flag instead of running its own main with the kernel's argv.
const argGuard = "--kennel-reaper"

// configVersion is the version of the marker's format; a reaper refuses any other.
const configVersion = 1

// ErrConfig reports a malformed reaper marker.
var ErrConfig = errors.New("bad reaper config")

// config is what the launcher tells the reaper through the marker variable.
type config struct {
	// parent is the launcher's pid. A reaper whose parent is already another process (the
	// launcher died before the reaper armed itself) gives up at once.
	parent int
	// grace is how long the reaper waits after forwarding SIGTERM before it kills hard.
	grace time.Duration
}

// encode renders c as "1,<parent>,<grace in ms>".
func (c config) encode() string {
	return fmt.Sprintf("%d,%d,%d", configVersion, c.parent, c.grace.Milliseconds())
}

// maxGrace bounds the grace a marker may ask for.
const maxGrace = 24 * time.Hour

// parseConfig reads a marker value written by encode. Anything else is an ErrConfig.
func parseConfig(s string) (config, error) {
	parts := strings.Split(s, ",")
	if len(parts) != 3 {
		return config{}, fmt.Errorf("parse reaper config %q: want 3 fields: %w", s, ErrConfig)
	}
	var n [3]int64
	for i, p := range parts {
		v, err := strconv.ParseInt(p, 10, 64)
		if err != nil || v < 0 || strconv.FormatInt(v, 10) != p {
			return config{}, fmt.Errorf("parse reaper config %q: field %d: %w", s, i, ErrConfig)
		}
		n[i] = v
	}
	if n[0] != configVersion {
		return config{}, fmt.Errorf("parse reaper config %q: version %d: %w", s, n[0], ErrConfig)
	}
	if n[1] < 1 || n[1] > 1<<22 {
		return config{}, fmt.Errorf("parse reaper config %q: parent pid: %w", s, ErrConfig)
	}
	if n[2] > maxGrace.Milliseconds() {
		return config{}, fmt.Errorf("parse reaper config %q: grace: %w", s, ErrConfig)
	}
	return config{parent: int(n[1]), grace: time.Duration(n[2]) * time.Millisecond}, nil
}
