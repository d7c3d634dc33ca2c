package images

import (
	"strings"
	"testing"
	"time"
)

// TestDetachedASilentConnectionIsDroppedAfterThreeHeartbeats: a controller that promised
// a heartbeat and then went silent (a partitioned host: its connection never ends by
// itself) is taken for gone after three heartbeats: the kernel closes the connection,
// starts its grace and, with nothing live, ends. A controller that keeps its promise is
// never dropped, even while a cell holds the interpreter in one long call.
func TestDetachedASilentConnectionIsDroppedAfterThreeHeartbeats(t *testing.T) {
	t.Parallel()
	t.Run("silent", func(t *testing.T) {
		t.Parallel()
		k := startDetached(t, detachedOpts{})
		c, _ := k.attachWith(0, 1, map[string]any{"heartbeat": 0.2})
		start := time.Now()
		for !c.closed() {
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("the silent connection was dropped after %v, want about 0.6 s", took)
		}
		if !strings.Contains(k.log(), "nothing heard for") {
			t.Errorf("kernel.log does not say why:\n%s", k.log())
		}
		// The grace (1 s) starts at the drop; nothing is live: the kernel ends.
		k.waitExit(10 * time.Second)
	})
	t.Run("beating", func(t *testing.T) {
		t.Parallel()
		k := startDetached(t, detachedOpts{})
		c, _ := k.attachWith(0, 1, map[string]any{"heartbeat": 0.2})
		stop := make(chan struct{})
		beat := make(chan struct{})
		go func() {
			defer close(beat)
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
					if _, err := c.c.Write([]byte(`{"ack":0}` + "\n")); err != nil {
						return
					}
				}
			}
		}()
		// A cell that holds the interpreter for about 2 s in one C call (a backtracking
		// regular expression): the kernel's threads read nothing meanwhile, and what the
		// controller wrote waits unread on the socket.
		s := &stream{t: t}
		c.send(1, 0, hostFrame("execute", "c1", "code", "import re, time\nt = time.monotonic()\nn = 0\nwhile time.monotonic() - t < 2:\n    re.match(r'(a+)+b', 'a' * 22)\n    n += 1\nprint('ran', n > 0)"))
		done := s.until(c, isDone("c1"))
		close(stop)
		<-beat
		if done.str("status") != "ok" || streamText(s.frames, "c1", "stdout") != "ran True\n" {
			t.Fatalf("done %s, stdout %q", done, streamText(s.frames, "c1", "stdout"))
		}
		if strings.Contains(k.log(), "nothing heard") {
			t.Errorf("a connection that kept its heartbeat was dropped:\n%s", k.log())
		}
		if k.exited() {
			t.Error("the kernel ended while attached")
		}
	})
}
