package images

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDetachedCutMidFrameDeliversExactlyOnce: the connection is cut in the middle of an
// envelope while a cell runs; after a reattach with the last seq applied, every frame of
// the cell arrives exactly once across both connections, the cut envelope was not
// applied, and the controller's seq goes on where it was.
func TestDetachedCutMidFrameDeliversExactlyOnce(t *testing.T) {
	t.Parallel()
	k := startDetached(t, detachedOpts{})
	c1, _ := k.attach(0, 60)
	s := &stream{t: t}
	c1.send(1, 0, hostFrame("execute", "c1", "code", "import time\nprint('a')\nx = 1\ntime.sleep(3)\nprint(x)"))
	s.until(c1, func(f frame) bool { return f.Event == "stream" && f.ID == "c1" })
	s.untilAck(c1, 1)
	half := []byte(`{"seq":2,"ack":0,"frame":{"type":"execute","id":"c2","code":"x = 2"}}` + "\n")
	c1.write(string(half[:len(half)/2]))
	c1.c.Close()

	c2, h := k.attach(s.last, 60)
	if got := hnum(t, h, "ack"); got != 1 {
		t.Errorf("hello ack = %d, want 1 (the cut envelope is not applied)", got)
	}
	if got := hnum(t, h, "epoch"); got != 2 {
		t.Errorf("hello epoch = %d, want 2", got)
	}
	s.until(c2, isDone("c1"))
	c2.send(2, s.last, hostFrame("execute", "c3", "code", "x"))
	if done := s.until(c2, isDone("c3")); done.str("result") != "1" {
		t.Errorf("x after the cut = %s, want 1", done)
	}
	if got := streamText(s.frames, "c1", "stdout"); got != "a\n1\n" {
		t.Errorf("c1 stdout across both connections = %q, want \"a\\n1\\n\"", got)
	}
	if n := s.count(isDone("c1")); n != 1 {
		t.Errorf("%d done frames for c1, want 1", n)
	}
	if n := s.count(isDone("c2")); n != 0 {
		t.Errorf("the cut execute ran: %d done frames for c2", n)
	}
}

// TestDetachedAppliesAReplayedFrameOnce: a frame whose seq was applied already is dropped
// (whatever it carries) and acknowledged again.
func TestDetachedAppliesAReplayedFrameOnce(t *testing.T) {
	t.Parallel()
	k := startDetached(t, detachedOpts{})
	c, _ := k.attach(0, 60)
	s := &stream{t: t}
	c.send(1, 0, hostFrame("execute", "c1", "code", "n = 1"))
	s.until(c, isDone("c1"))
	s.untilAck(c, 1)
	c.send(1, s.last, hostFrame("execute", "c2", "code", "n = 2"))
	if e := c.next(); e.Seq != 0 || e.Ack != 1 {
		t.Errorf("answer to a replay = seq %d ack %d, want a bare ack 1", e.Seq, e.Ack)
	}
	c.send(2, s.last, hostFrame("execute", "c3", "code", "n"))
	if done := s.until(c, isDone("c3")); done.str("result") != "1" {
		t.Errorf("n = %s, want 1: the replay was applied", done)
	}
	if n := s.count(isDone("c2")); n != 0 {
		t.Errorf("the replayed seq ran: %d done frames for c2", n)
	}
}

// TestDetachedTakesEnvelopesSentWithTheAttach: envelopes that come in the same write as
// the attach line, before the hello, are applied in order once the hello is out, and
// acknowledged.
func TestDetachedTakesEnvelopesSentWithTheAttach(t *testing.T) {
	t.Parallel()
	k := startDetached(t, detachedOpts{})
	c := k.dial()
	one := fmt.Sprintf(`{"seq":1,"ack":0,"frame":%s}`+"\n", bytes.TrimSuffix(hostFrame("execute", "c1", "code", "v = 41"), []byte("\n")))
	two := fmt.Sprintf(`{"seq":2,"ack":0,"frame":%s}`+"\n", bytes.TrimSuffix(hostFrame("execute", "c2", "code", "v + 1"), []byte("\n")))
	c.write(attachLine(k.id, k.token, 0, 60) + one + two)
	if line, err := c.line(); err != nil || !bytes.HasPrefix(line, []byte(`{"hello":`)) {
		t.Fatalf("answer to the attach: %q (%v), want a hello", line, err)
	}
	s := &stream{t: t}
	if done := s.until(c, isDone("c2")); done.str("result") != "42" {
		t.Errorf("c2 = %s, want 42: the envelopes behind the attach were not applied in order", done)
	}
	s.untilAck(c, 2)
}

// TestDetachedExecuteOfAKnownCellIsNotRunAgain: an execute for a finished cell is
// answered with its done again, byte for byte; one for a running cell is ignored.
func TestDetachedExecuteOfAKnownCellIsNotRunAgain(t *testing.T) {
	t.Parallel()
	k := startDetached(t, detachedOpts{})
	c, _ := k.attach(0, 60)
	s := &stream{t: t}
	body := "count = globals().get('count', 0) + 1\ncount"
	c.send(1, 0, hostFrame("execute", "c1", "code", body))
	first := s.until(c, isDone("c1"))
	c.send(2, s.last, hostFrame("execute", "c1", "code", body))
	again := s.until(c, isDone("c1"))
	if !bytes.Equal(first.Raw, again.Raw) {
		t.Errorf("done sent again = %s, want %s", again, first)
	}
	c.send(3, s.last, hostFrame("execute", "c2", "code", "import time\ntime.sleep(0.5)\ncount += 1\ncount"))
	c.send(4, s.last, hostFrame("execute", "c2", "code", "count += 100"))
	c.send(5, s.last, hostFrame("execute", "c3", "code", "count"))
	if done := s.until(c, isDone("c3")); done.str("result") != "2" {
		t.Errorf("count = %s, want 2: c1 or c2 ran twice", done)
	}
	if n := s.count(isDone("c2")); n != 1 {
		t.Errorf("%d done frames for c2, want 1", n)
	}
	if n := s.count(isDone("c1")); n != 2 {
		t.Errorf("%d done frames for c1, want 2 (the first and the one sent again)", n)
	}
}

// TestDetachedUnreadConnectionDoesNotStallTheKernel: a controller that stops reading
// does not hold the kernel: its cell runs to the end while the outbox drops its oldest
// frames past 4096, the next hello counts the drops, and the newest frames, the done
// among them, still arrive, in rising seq.
func TestDetachedUnreadConnectionDoesNotStallTheKernel(t *testing.T) {
	t.Parallel()
	k := startDetached(t, detachedOpts{})
	c1, _ := k.attach(0, 60)
	mark := filepath.Join(t.TempDir(), "ended")
	// stdout and stderr in turn: each switch ends a coalesced stream frame, so 40,000 frames.
	code := fmt.Sprintf("import sys\nfor i in range(20000):\n    print(i)\n    print(i, file=sys.stderr)\nopen(%q, 'w').close()", mark)
	c1.send(1, 0, hostFrame("execute", "c1", "code", code))
	eventually(t, "the cell ends unread", func() bool {
		_, err := os.Stat(mark)
		return err == nil
	})
	c2, h := k.attach(0, 60)
	// The cell's last frames may still wait in the pipe to the link when its marker
	// appears (a loaded machine): the hello counts the drops so far, which are the oldest
	// frames, so the resend starts right after them and runs on without a gap.
	dropped := uint64(hnum(t, h, "dropped"))
	if dropped == 0 {
		t.Errorf("hello dropped = 0: 40,000 unread frames did not overflow a 4096-frame outbox")
	}
	var last uint64
	var first uint64
	for {
		e := c2.next()
		if e.Seq == 0 {
			continue
		}
		if last != 0 && e.Seq != last+1 {
			t.Fatalf("seq %d after %d: a gap or a repeat after the hello", e.Seq, last)
		}
		if first == 0 {
			first = e.Seq
		}
		last = e.Seq
		if e.Frame.Event == "done" && e.Frame.ID == "c1" {
			if e.Frame.str("status") != "ok" {
				t.Errorf("done = %s", e.Frame)
			}
			break
		}
	}
	// Frames still reaching a full outbox while the resend starts may drop one or two more
	// (the next hello counts those), never one of the dropped ones back.
	if first <= dropped || first > dropped+64 {
		t.Errorf("first seq resent = %d after %d drops, want just after them: the oldest frames go first", first, dropped)
	}
	t.Logf("resent seqs %d..%d after %d drops", first, last, hnum(t, h, "dropped"))
}

// TestDetachedCarriesLargeFrames: an 8 MiB execute and a 4 MiB result cross the link
// whole.
func TestDetachedCarriesLargeFrames(t *testing.T) {
	t.Parallel()
	k := startDetached(t, detachedOpts{})
	c, _ := k.attach(0, 60)
	s := &stream{t: t}
	c.send(1, 0, hostFrame("execute", "c1", "code", "s = '"+strings.Repeat("x", 8<<20)+"'\nlen(s)"))
	if done := s.until(c, isDone("c1")); done.str("result") != "8388608" {
		t.Errorf("done = %s", done)
	}
	c.send(2, s.last, hostFrame("execute", "c2", "code", "'y' * (4 << 20)"))
	done := s.until(c, isDone("c2"))
	if r := done.str("result"); len(r) != 4<<20+2 || strings.Trim(r, "'y") != "" {
		t.Errorf("result of %d bytes", len(r))
	}
}
