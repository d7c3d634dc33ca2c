package link_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/link"
	"github.com/kennel-dev/kennel/link/linktest"
)

// TestAnIdleLinkBeatsAndNamesItsController: every attach names the client's own
// controller instance (the same across its reattaches, another for another client) and
// its heartbeat; an idle link writes a bare ack every heartbeat, and none with the
// heartbeat turned off.
func TestAnIdleLinkBeatsAndNamesItsController(t *testing.T) {
	k := linktest.Start(t, t.TempDir(), "k1", token)
	open := func(beat time.Duration) *link.Client {
		c, err := link.Open(context.Background(), link.Options{Kernel: "k1", Token: token, Dial: link.DialUnix(k.Socket()), Backoff: fastBackoff(), Heartbeat: beat})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := open(50 * time.Millisecond)
	a := k.Attach()
	if a.Heartbeat != 0.05 || len(a.Controller) < 16 {
		t.Fatalf("attach %+v: want heartbeat 0.05 and a controller name", a)
	}
	deadline := time.Now().Add(10 * time.Second)
	for k.Lines() < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("%d lines in 10 s from an idle link beating every 50 ms", k.Lines())
		}
		time.Sleep(10 * time.Millisecond)
	}
	k.Drop()
	for k.Epoch() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no reattach after the drop")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if again := k.Attach(); again.Controller != a.Controller {
		t.Errorf("a reattach names controller %q, the first attach %q: want the same", again.Controller, a.Controller)
	}
	c.Close()

	quiet := open(-1)
	defer quiet.Close()
	if b := k.Attach(); b.Heartbeat != 0 || b.Controller == a.Controller {
		t.Fatalf("attach %+v: want no heartbeat and a controller other than %q", b, a.Controller)
	}
	before := k.Lines()
	time.Sleep(300 * time.Millisecond)
	if n := k.Lines() - before; n != 0 {
		t.Errorf("%d lines from an idle link without a heartbeat", n)
	}
}

// TestTryingGivesUpWithinItsBound: attempts that each wait (a partitioned host's connect
// timeout) stop once Backoff.Within has passed, with tries left: the link reports
// ErrUnreachable after about that long, not after all its tries.
func TestTryingGivesUpWithinItsBound(t *testing.T) {
	tries := 0
	slow := func(ctx context.Context) (net.Conn, error) {
		tries++
		time.Sleep(100 * time.Millisecond)
		return nil, errors.New("connect: timed out")
	}
	start := time.Now()
	_, err := link.Open(context.Background(), link.Options{Kernel: "k1", Token: token, Dial: slow,
		Backoff: link.Backoff{First: time.Millisecond, Max: time.Millisecond, Tries: 1000, Within: 500 * time.Millisecond}})
	if !errors.Is(err, link.ErrUnreachable) {
		t.Fatalf("open: %v, want ErrUnreachable", err)
	}
	if took := time.Since(start); tries >= 1000 || took > 5*time.Second {
		t.Fatalf("%d tries in %v: want it to stop about 0.5 s in", tries, took)
	}
	t.Logf("%d tries in %v: %v", tries, time.Since(start).Round(time.Millisecond), err)
}
