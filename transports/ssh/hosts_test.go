package ssh

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

// TestTheProbeCacheIsBounded: probing more hosts than MaxCachedProbes (each a user at a
// port nobody listens on: a real, quick refusal) keeps MaxCachedProbes answers, those
// probed most recently; a cached answer read again does not count as probed; an expired
// answer is dropped when it is looked up. The clock is the test's, so no answer expires
// on its own while the hosts are probed.
func TestTheProbeCacheIsBounded(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	h, err := NewHosts(HostsOptions{ConfigFile: "none", KnownHosts: t.TempDir() + "/known_hosts", AgentSocket: "none"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var mu sync.Mutex
	clock := time.Unix(1_000_000_000, 0)
	h.now = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		clock = clock.Add(time.Microsecond)
		return clock
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	target := func(i int) string { return fmt.Sprintf("u%d@127.0.0.1:%d", i, port) }
	const extra = 8
	for i := range MaxCachedProbes + extra {
		if p := h.Probe(ctx, target(i)); p.Status != StatusUnreachable {
			t.Fatalf("probe of %s: %+v", target(i), p)
		}
	}
	cached := func(i int) bool { _, ok := h.Cached(target(i)); return ok }
	h.probeMu.Lock()
	n := h.cache.len()
	h.probeMu.Unlock()
	t.Logf("%d hosts probed: %d answers cached", MaxCachedProbes+extra, n)
	if n != MaxCachedProbes {
		t.Fatalf("%d hosts probed left %d answers cached, want %d", MaxCachedProbes+extra, n, MaxCachedProbes)
	}
	for i := range extra {
		if cached(i) {
			t.Errorf("%s, among the %d probed first, is still cached", target(i), extra)
		}
	}
	if !cached(extra) || !cached(MaxCachedProbes+extra-1) {
		t.Fatalf("the answers probed most recently are not all cached")
	}
	// Reading the oldest answer (and a Probe it answers) is no probe: the next host
	// probed pushes it out.
	if p := h.Probe(ctx, target(extra)); p.Status != StatusUnreachable {
		t.Fatalf("cached probe: %+v", p)
	}
	h.Probe(ctx, target(MaxCachedProbes+extra))
	if cached(extra) || !cached(extra+1) || !cached(MaxCachedProbes+extra) {
		t.Errorf("one more host probed: want the oldest answer gone, the next and the newest kept")
	}
	// Once every answer is stale, the one looked up is dropped.
	mu.Lock()
	clock = clock.Add(FailureTTL)
	mu.Unlock()
	if cached(extra + 1) {
		t.Fatalf("an answer %v old is still cached", FailureTTL)
	}
	h.probeMu.Lock()
	n = h.cache.len()
	h.probeMu.Unlock()
	if n != MaxCachedProbes-1 {
		t.Errorf("after an expired answer was looked up: %d cached, want %d", n, MaxCachedProbes-1)
	}
}

// len is the number of answers held, fresh or not.
func (c *probeCache) len() int { return c.order.Len() }
