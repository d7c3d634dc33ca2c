package transporttest

import (
	"fmt"
	"strings"
)

// EnvMap reads an environment ("KEY=VALUE" entries) the way a process sees it: the last
// entry of a key wins.
func EnvMap(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// CheckEnv reports an error unless env, an environment a transport built for a kernel,
// holds each key once and exactly the entries of want.
func CheckEnv(env []string, want map[string]string) error {
	seen := map[string]bool{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if seen[k] {
			return fmt.Errorf("key %s twice in %q", k, env)
		}
		seen[k] = true
	}
	got := EnvMap(env)
	if len(got) != len(want) {
		return fmt.Errorf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			return fmt.Errorf("%s=%q, want %q (got %q)", k, got[k], v, env)
		}
	}
	return nil
}
