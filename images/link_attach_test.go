package images

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestDetachedHelloNamesTheKernelAndACellRuns: the hello has exactly the spec's fields
// with this kernel's values, and a cell sent in an envelope answers in envelopes whose
// seqs rise from 1, with the controller's frame acknowledged.
func TestDetachedHelloNamesTheKernelAndACellRuns(t *testing.T) {
	t.Parallel()
	k := startDetached(t, detachedOpts{})
	b, _ := stubDir(t)
	c, h := k.attach(0, 60)

	var keys []string
	for key := range h {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	want := []string{"ack", "bundle", "cells", "dropped", "epoch", "jobs", "leader", "pgid", "pid", "protocol", "python"}
	if strings.Join(keys, ",") != strings.Join(want, ",") {
		t.Errorf("hello keys = %v, want %v", keys, want)
	}
	pid := k.pid()
	for key, v := range map[string]int{"protocol": 2, "epoch": 1, "ack": 0, "pid": pid, "pgid": pid, "cells": 0, "dropped": 0, "leader": procStart(t, pid)} {
		if got := hnum(t, h, key); got != v {
			t.Errorf("hello %s = %d, want %d", key, got, v)
		}
	}
	if h["bundle"] != b.Hash() {
		t.Errorf("hello bundle = %v, want %s", h["bundle"], b.Hash())
	}
	if s, _ := h["python"].(string); !regexp.MustCompile(`^3\.\d+\.\d+$`).MatchString(s) {
		t.Errorf("hello python = %v", h["python"])
	}
	if jobs, ok := h["jobs"].([]any); !ok || len(jobs) != 0 {
		t.Errorf("hello jobs = %#v, want []", h["jobs"])
	}

	s := &stream{t: t}
	c.send(1, 0, hostFrame("execute", "c1", "code", "print('hi')\n6*7"))
	done := s.until(c, isDone("c1"))
	if done.str("result") != "42" || done.str("status") != "ok" {
		t.Errorf("done = %s", done)
	}
	if got := streamText(s.frames, "c1", "stdout"); got != "hi\n" {
		t.Errorf("stdout = %q", got)
	}
	s.untilAck(c, 1)
}

// TestDetachedHelloCountsLiveCellsAndJobs: a reattach's hello counts the running and
// queued cells and lists the live jobs with their pid and pgid.
func TestDetachedHelloCountsLiveCellsAndJobs(t *testing.T) {
	t.Parallel()
	k := startDetached(t, detachedOpts{})
	c, _ := k.attach(0, 60)
	s := &stream{t: t}
	c.send(1, 0, hostFrame("job_run", "j1", "command", "sleep 1000"))
	start := s.until(c, func(f frame) bool { return f.Event == "job_start" })
	jobPID := num(t, start.M["pid"])
	c.send(2, 0, hostFrame("execute", "c1", "code", "import time\nprint('go')\ntime.sleep(100)"))
	c.send(3, 0, hostFrame("execute", "c2", "code", "1"))
	s.until(c, func(f frame) bool { return f.Event == "stream" && f.ID == "c1" })
	s.untilAck(c, 3)

	// The queued cell counts once the kernel proper has taken its execute from the
	// link's pipe: attach until it does.
	var c2 *lconn
	var h map[string]any
	epoch := 1
	eventually(t, "hello counts 2 cells", func() bool {
		c2, h = k.attach(s.last, 60)
		epoch++
		return hnum(t, h, "cells") == 2
	})
	if got := hnum(t, h, "epoch"); got != epoch {
		t.Errorf("hello epoch = %d, want %d", got, epoch)
	}
	if got := hnum(t, h, "ack"); got != 3 {
		t.Errorf("hello ack = %d, want 3", got)
	}
	jobs, _ := h["jobs"].([]any)
	if len(jobs) != 1 {
		t.Fatalf("hello jobs = %v, want j1", h["jobs"])
	}
	j, _ := jobs[0].(map[string]any)
	if j["id"] != "j1" || num(t, j["pid"]) != jobPID || num(t, j["pgid"]) != jobPID {
		t.Errorf("hello job = %v, want j1 with pid and pgid %d", j, jobPID)
	}
	c2.send(4, s.last, hostFrame("job_kill", "j1", "signal", 9))
	c2.send(5, s.last, hostFrame("interrupt", "c1"))
	s.until(c2, isDone("c2"))
	eventually(t, "job group gone", func() bool { return groupGone(jobPID) })
}

// TestDetachedRefusesWithoutChangingAnything: a wrong token, another kernel's id and a
// line that is no attach are each answered refused and closed, and logged; the attached
// connection goes on working, and the next attach's epoch is the one after it.
func TestDetachedRefusesWithoutChangingAnything(t *testing.T) {
	t.Parallel()
	k := startDetached(t, detachedOpts{})
	c, _ := k.attach(0, 60)
	s := &stream{t: t}
	c.send(1, 0, hostFrame("execute", "c1", "code", "'before'"))
	s.until(c, isDone("c1"))

	for _, line := range []string{
		attachLine(k.id, strings.Repeat("0", 64), s.last, 60),
		attachLine(k.id, k.token[:63]+"x", s.last, 60),
		attachLine("another", k.token, s.last, 60),
		"hello\n",
		`{"attach":{"kernel":"` + k.id + `","token":"` + k.token + `","ack":-1,"grace":60}}` + "\n",
		`{"attach":{"kernel":"` + k.id + `","token":"` + k.token + `","ack":0}}` + "\n",
		`{"seq":1,"ack":0,"frame":{}}` + "\n",
	} {
		bad := k.dial()
		bad.write(line)
		answer, err := bad.line()
		var v map[string]any
		if err != nil || json.Unmarshal(answer, &v) != nil || len(v) != 1 || v["refused"] == nil {
			t.Errorf("answer to %q = %q (%v), want {\"refused\":...}", line, answer, err)
			continue
		}
		if !bad.closed() {
			t.Errorf("connection not closed after the refusal of %q", line)
		}
	}

	c.send(2, s.last, hostFrame("execute", "c2", "code", "'after'"))
	if done := s.until(c, isDone("c2")); done.str("result") != "'after'" {
		t.Errorf("the attached connection after the refusals: %s", done)
	}
	_, h := k.attach(s.last, 60)
	if got := hnum(t, h, "epoch"); got != 2 {
		t.Errorf("epoch after refusals = %d, want 2", got)
	}
	if got := strings.Count(k.log(), "attach refused"); got != 7 {
		t.Errorf("kernel.log has %d refusals, want 7:\n%s", got, k.log())
	}
}

// TestDetachedNewestAttachWins: a second attach closes the first connection; the second
// serves, with the next epoch.
func TestDetachedNewestAttachWins(t *testing.T) {
	t.Parallel()
	k := startDetached(t, detachedOpts{})
	c1, h1 := k.attach(0, 60)
	c2, h2 := k.attach(0, 60)
	if e1, e2 := hnum(t, h1, "epoch"), hnum(t, h2, "epoch"); e1 != 1 || e2 != 2 {
		t.Errorf("epochs = %d, %d, want 1, 2", e1, e2)
	}
	if !c1.closed() {
		t.Error("the older connection was not closed")
	}
	s := &stream{t: t}
	c2.send(1, 0, hostFrame("execute", "c1", "code", "1+1"))
	if done := s.until(c2, isDone("c1")); done.str("result") != "2" {
		t.Errorf("done = %s", done)
	}
}

// TestDetachedFaultClosesTheConnection: a line after the handshake that is not an
// envelope closes that connection (logged); the kernel takes a new attach.
func TestDetachedFaultClosesTheConnection(t *testing.T) {
	t.Parallel()
	k := startDetached(t, detachedOpts{})
	faults := []string{
		"not json",
		`{"seq":0,"ack":0,"frame":{"type":"execute","id":"x","code":"1"}}`,
		`{"seq":1.5,"ack":0,"frame":{"type":"execute","id":"x","code":"1"}}`,
		`{"seq":true,"ack":0,"frame":{"type":"execute","id":"x","code":"1"}}`,
		`{"seq":1,"ack":-1,"frame":{"type":"execute","id":"x","code":"1"}}`,
		`{"seq":1,"ack":0,"frame":[1]}`,
		`{"seq":1,"ack":0,"frame":{"type":"execute","id":"x","code":"1"},"more":1}`,
		`{"seq":1,"frame":{"type":"execute","id":"x","code":"1"},"ack":0}`,
		`{"ack":1,"more":2}`,
		`[1]`,
	}
	for i, line := range faults {
		c, h := k.attach(0, 60)
		if got := hnum(t, h, "epoch"); got != i+1 {
			t.Errorf("epoch = %d, want %d", got, i+1)
		}
		c.write(line + "\n")
		for {
			l, err := c.line()
			if err != nil {
				break
			}
			if _, derr := decodeEnvelope(l); derr != nil {
				t.Fatalf("after fault %q: %v", line, derr)
			}
		}
	}
	c, _ := k.attach(0, 60)
	s := &stream{t: t}
	c.send(1, 0, hostFrame("execute", "c1", "code", "'x' in globals()"))
	if done := s.until(c, isDone("c1")); done.str("result") != "False" {
		t.Errorf("a faulty line was applied: %s", done)
	}
	if got := strings.Count(k.log(), "protocol fault"); got != len(faults) {
		t.Errorf("kernel.log has %d faults, want %d:\n%s", got, len(faults), k.log())
	}
}

// TestDetachedStartRefusals: a bad token line or a run directory that is not private
// ends the stub with status 2 and a message, before it binds.
func TestDetachedStartRefusals(t *testing.T) {
	t.Parallel()
	str := func(s string) *string { return &s }
	cases := []struct {
		name string
		opts func(t *testing.T) detachedOpts
	}{
		{"no token", func(*testing.T) detachedOpts { return detachedOpts{tokenLine: str("")} }},
		{"short token", func(*testing.T) detachedOpts { return detachedOpts{tokenLine: str("abc\n")} }},
		{"upper-case token", func(*testing.T) detachedOpts { return detachedOpts{tokenLine: str(strings.Repeat("A", 64) + "\n")} }},
		{"long token", func(*testing.T) detachedOpts { return detachedOpts{tokenLine: str(strings.Repeat("a", 65) + "\n")} }},
		{"run dir 0755", func(*testing.T) detachedOpts { return detachedOpts{mode: 0o755} }},
		{"run dir missing", func(t *testing.T) detachedOpts {
			return detachedOpts{run: filepath.Join(t.TempDir(), "nothing")}
		}},
		{"run dir a symlink", func(t *testing.T) detachedOpts {
			base := t.TempDir()
			real := filepath.Join(base, "real")
			if err := os.Mkdir(real, 0o700); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(base, "link")
			if err := os.Symlink(real, link); err != nil {
				t.Fatal(err)
			}
			return detachedOpts{run: link}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := tc.opts(t)
			opts.noSocket = true
			k := startDetached(t, opts)
			code, _ := k.waitExit(wait)
			if code != 2 {
				t.Errorf("exit code = %d, want 2", code)
			}
			if !strings.Contains(k.out.String(), "kennel:") {
				t.Errorf("stderr = %q, want a message", k.out.String())
			}
			if _, err := os.Lstat(filepath.Join(k.run, "kernel.sock")); err == nil {
				t.Error("kernel.sock was bound")
			}
		})
	}
}

// TestDetachedBindsInADeepRunDirectory: a run directory whose path is longer than
// sun_path's 108 bytes still gets its socket (bound by a relative name), mode 0600.
func TestDetachedBindsInADeepRunDirectory(t *testing.T) {
	t.Parallel()
	run := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60), "k-deep")
	if err := os.MkdirAll(run, 0o700); err != nil {
		t.Fatal(err)
	}
	k := startDetached(t, detachedOpts{run: run})
	info, err := os.Lstat(filepath.Join(run, "kernel.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode()&os.ModeSocket == 0 || info.Mode().Perm() != 0o600 {
		t.Errorf("kernel.sock mode = %v, want a socket, 0600", info.Mode())
	}
	c, h := k.attach(0, 60)
	if hnum(t, h, "epoch") != 1 {
		t.Errorf("hello = %v", h)
	}
	s := &stream{t: t}
	c.send(1, 0, hostFrame("execute", "c1", "code", "7"))
	s.until(c, isDone("c1"))
	if info, err := os.Stat(filepath.Join(run, "kernel.log")); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("kernel.log: %v, %v, want mode 0600", info, err)
	}
}

// TestDetachedStartsThroughTheBootstrap: a stub started without files (the bundle on
// fd 0, then the token line) runs detached the same way.
func TestDetachedStartsThroughTheBootstrap(t *testing.T) {
	t.Parallel()
	b, _ := stubDir(t)
	k := startDetached(t, detachedOpts{bootstrap: true})
	c, h := k.attach(0, 60)
	if h["bundle"] != b.Hash() || hnum(t, h, "pid") != k.pid() {
		t.Errorf("hello = %v", h)
	}
	s := &stream{t: t}
	c.send(1, 0, hostFrame("execute", "c1", "code", "import kennel._link\n3*3"))
	if done := s.until(c, isDone("c1")); done.str("result") != "9" {
		t.Errorf("done = %s", done)
	}
}
