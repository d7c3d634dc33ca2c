package docker

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/kennel-dev/kennel/pathmap"
)

// DefaultUser never yields root and keeps a non-root operator's own ids.
func TestDefaultUserProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		uid := rapid.IntRange(0, 70000).Draw(t, "uid")
		gid := rapid.IntRange(0, 70000).Draw(t, "gid")
		ou := rapid.IntRange(0, 70000).Draw(t, "ownerUID")
		og := rapid.IntRange(0, 70000).Draw(t, "ownerGID")
		ok := rapid.Bool().Draw(t, "ownerKnown")
		got := DefaultUser(uid, gid, func() (int, int, bool) { return ou, og, ok })
		u, _, _ := strings.Cut(got, ":")
		if u == "0" {
			t.Fatalf("DefaultUser(%d, %d) = %q: root", uid, gid, got)
		}
		switch {
		case uid != 0:
			if got != fmt.Sprintf("%d:%d", uid, gid) {
				t.Fatalf("operator %d:%d got %q", uid, gid, got)
			}
		case ok && ou != 0:
			if got != fmt.Sprintf("%d:%d", ou, og) {
				t.Fatalf("root operator, owner %d:%d, got %q", ou, og, got)
			}
		default:
			if got != FallbackUser {
				t.Fatalf("root operator, root owner, got %q", got)
			}
		}
	})
}

// Labels written for a controller read back as the same controller; a label set that
// was tampered with is not a whole identity.
func TestControllerLabelsRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := Controller{
			Host:  rapid.StringMatching(`[a-z0-9.-]{1,20}`).Draw(t, "host"),
			Boot:  rapid.StringMatching(`[0-9a-f-]{1,36}`).Draw(t, "boot"),
			PID:   rapid.IntRange(1, 1<<22).Draw(t, "pid"),
			Start: rapid.Uint64().Draw(t, "start"),
		}
		got, ok := ControllerOf(c.Meta(LabelController), LabelController)
		if !ok || got != c {
			t.Fatalf("round trip of %+v: %+v, %v", c, got, ok)
		}
		l := c.Meta(LabelController)
		l[LabelPID] = fmt.Sprint(c.PID + 1)
		if _, ok := ControllerOf(l, LabelController); ok {
			t.Fatalf("a pid label that disagrees with the id was accepted")
		}
	})
}

// The sweep's verdicts: own sessions unless kept; dead controllers of this host (gone
// pid, reused pid, other boot); never a live controller's or another host's.
func TestSweepable(t *testing.T) {
	self, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	parent, err := Process(os.Getppid())
	if err != nil {
		t.Fatal(err)
	}
	dead := self
	dead.PID = 1 << 22 // beyond pid_max's default: never a live pid
	reused := parent
	reused.Start++
	rebooted := parent
	rebooted.Boot = "another-boot"
	other := dead
	other.Host = self.Host + "-elsewhere"
	lbl := func(c Controller, session string) map[string]string {
		l := c.Meta(LabelController)
		l[LabelKennel], l[LabelSession] = "1", session
		return l
	}
	keep := func(s string) bool { return s == "kept" }
	cases := []struct {
		name   string
		labels map[string]string
		want   bool
	}{
		{"own session not kept", lbl(self, "gone"), true},
		{"own session kept", lbl(self, "kept"), false},
		{"live controller", lbl(parent, "s"), false},
		{"dead pid", lbl(dead, "s"), true},
		{"reused pid", lbl(reused, "s"), true},
		{"host rebooted", lbl(rebooted, "s"), true},
		{"another host", lbl(other, "s"), false},
		{"no owner labels", map[string]string{LabelKennel: "1"}, false},
	}
	for _, c := range cases {
		if got := sweepable("c1", c.labels, SweepOptions{Self: self, Keep: keep}); got != c.want {
			t.Errorf("%s: sweepable %v, want %v", c.name, got, c.want)
		}
	}
	// Detached kernels' containers: only this owner's, and only those no record holds.
	held := func(id string) bool { return id == "held" }
	mine := map[string]string{LabelKennel: "1", LabelDetached: "1", LabelDetachedOwner: "me"}
	for _, c := range []struct {
		name   string
		id     string
		labels map[string]string
		o      SweepOptions
		want   bool
	}{
		{"mine, held", "held", mine, SweepOptions{Self: self, Owner: "me", Held: held}, false},
		{"mine, no record", "lost", mine, SweepOptions{Self: self, Owner: "me", Held: held}, true},
		{"another owner's", "lost", map[string]string{LabelKennel: "1", LabelDetached: "1", LabelDetachedOwner: "them"}, SweepOptions{Self: self, Owner: "me", Held: held}, false},
		{"no owner label", "lost", map[string]string{LabelKennel: "1", LabelDetached: "1"}, SweepOptions{Self: self, Owner: "me", Held: held}, false},
		{"a sweep without records", "lost", mine, SweepOptions{Self: self}, false},
	} {
		if got := sweepable(c.id, c.labels, c.o); got != c.want {
			t.Errorf("detached, %s: sweepable %v, want %v", c.name, got, c.want)
		}
	}
}

// hostDirOf maps through the deepest mount only, and not through a mere name prefix.
func TestHostDirOf(t *testing.T) {
	ms := []pathmap.Mount{{Sandbox: "/work", Host: "/h/w"}, {Sandbox: "/work/sub", Host: "/h/s"}}
	for dir, want := range map[string]string{"/work": "/h/w", "/work/a/b": "/h/w/a/b", "/work/sub/x": "/h/s/x", "/workshop": "", "/": ""} {
		got, ok := hostDirOf(ms, dir)
		if !ok {
			got = ""
		}
		if got != want {
			t.Errorf("hostDirOf(%q) = %q, want %q", dir, got, want)
		}
	}
}

// Options that cannot work are refused before anything runs.
func TestOptionsRefused(t *testing.T) {
	for _, o := range []Options{
		{Mounts: []pathmap.Mount{{Sandbox: "work", Host: "/h"}}},
		{Mounts: []pathmap.Mount{{Sandbox: "/w", Host: "/h,ro"}}},
		{Network: "host"},
		{Network: "container:abc"},
	} {
		if err := o.check(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// The kernel's own end is an OOM only with the engine's OOM flag, a SIGKILL end, and no
// stop stage before it.
func TestKernelOOMRule(t *testing.T) {
	for _, c := range []struct {
		oomKilled bool
		code      int
		stopped   bool
		want      bool
	}{
		{true, 137, false, true},
		{true, 0, false, false},   // a child was OOM-killed; the kernel exited at EOF
		{true, 143, false, false}, // ... or at SIGTERM
		{true, 137, true, false},  // ... then the stop stage's SIGKILL ended it
		{false, 137, false, false},
		{false, 0, false, false},
	} {
		if got := kernelOOM(c.oomKilled, c.code, c.stopped); got != c.want {
			t.Errorf("kernelOOM(%v, %d, %v) = %v, want %v", c.oomKilled, c.code, c.stopped, got, c.want)
		}
	}
}
