package daemon_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
	kclient "github.com/kennel-dev/kennel/client"
	"github.com/kennel-dev/kennel/daemon"
	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/launch"
	"github.com/kennel-dev/kennel/transports/ssh"
	"github.com/kennel-dev/kennel/transports/ssh/sshtest"
)

// TestAPartitionedHostKeepsItsKernel: the network between the daemon and an ssh host (a
// real sshd in a network namespace of its own, reached over veth) is cut for 20 s while
// a cell runs there, then restored: the cell's output arrives once, and the namespace is
// kept (the same kernel, never replaced by a fresh one while it may run).
func TestAPartitionedHostKeepsItsKernel(t *testing.T) {
	srv, r, s := partitionedSession(t, ssh.Options{})
	ctx := context.Background()
	before, _ := r.c.Session(ctx, s.ID)
	budget := int64(120_000)
	type result struct {
		rep *api.CellReply
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "import time; time.sleep(5); print(x)", BudgetMS: &budget})
		done <- result{rep, err}
	}()
	time.Sleep(time.Second)
	srv.Cut(t)
	cut := time.Now()
	time.Sleep(20 * time.Second)
	srv.Restore(t)
	t.Logf("cut for %v", time.Since(cut).Round(time.Millisecond))
	res := <-done
	if res.err != nil || res.rep.State != "settled" || res.rep.Cell == nil || res.rep.Cell.Status != "ok" || res.rep.Output.Text != "1\n" {
		t.Fatalf("the cell across the partition: %+v, %v; want its output once", res.rep, res.err)
	}
	rep, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "x + 1"})
	if err != nil || rep.Cell == nil || rep.Cell.Result == nil || *rep.Cell.Result != "2" {
		t.Fatalf("the namespace after the partition: %+v, %v", rep, err)
	}
	after, _ := r.c.Session(ctx, s.ID)
	if *after.Kernel.PID != *before.Kernel.PID {
		t.Fatalf("the kernel was replaced across the partition: pid %d, then %d", *before.Kernel.PID, *after.Kernel.PID)
	}
}

// partitionedSession serves a daemon whose detached kernels run on a partitionable ssh
// host (o: the ssh transport's options), with one session there that ran "x = 1".
func partitionedSession(t *testing.T, o ssh.Options) (*sshtest.Server, *running, *api.Session) {
	t.Helper()
	srv := sshtest.StartPartitionable(t)
	state := filepath.Join(shortDir(t), "state")
	kit := launch.New(launch.Options{
		RunDir: daemon.KernelRunDir(state),
		Hosts:  ssh.HostsOptions{ConfigFile: srv.ConfigFile, KnownHosts: srv.KnownHosts, AgentSocket: "none", KeepAlive: time.Second},
		SSH:    o,
	})
	t.Cleanup(func() { _ = kit.Close() })
	r := serve(t, daemon.Options{StateDir: state, Kit: kit})
	ctx := context.Background()
	s, err := r.c.CreateSession(ctx, api.CreateSession{Transport: &api.Transport{SSH: &api.SSH{Target: sshtest.Alias}}}, kclient.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "x = 1"}); err != nil {
		t.Fatal(err)
	}
	return srv, r, s
}

// TestAHostWithoutSFTPRunsCellsAndSaysWhyFilesCannot: an ssh host whose sshd has no SFTP
// subsystem still gives a session whose cells run; its fs.* requests answer unavailable,
// naming SFTP (not a misleading "unreachable" that fails the session).
func TestAHostWithoutSFTPRunsCellsAndSaysWhyFilesCannot(t *testing.T) {
	srv := sshtest.StartWith(t, sshtest.Options{NoSFTP: true})
	kit := launch.New(launch.Options{Hosts: ssh.HostsOptions{ConfigFile: srv.ConfigFile, KnownHosts: srv.KnownHosts, AgentSocket: "none"}})
	t.Cleanup(func() { _ = kit.Close() })
	r := serve(t, daemon.Options{Kit: kit})
	ctx := context.Background()
	s, err := r.c.CreateSession(ctx, api.CreateSession{Transport: &api.Transport{SSH: &api.SSH{Target: sshtest.Alias}}}, kclient.CreateOptions{})
	if err != nil {
		t.Fatalf("a session on a host without SFTP: %v", err)
	}
	rep, err := r.c.RunCell(ctx, s.ID, api.RunCell{Code: "6 * 7"})
	if err != nil || rep.Cell == nil || *rep.Cell.Result != "42" {
		t.Fatalf("a cell there: %+v, %v", rep, err)
	}
	rep, err = r.c.RunCell(ctx, s.ID, api.RunCell{Code: "from kennel import fs\ntry:\n    fs.read('x')\nexcept Exception as e:\n    print(type(e).__name__, e)"})
	if err != nil || rep.Cell == nil || !strings.Contains(rep.Output.Text, "SFTP") || !strings.Contains(rep.Output.Text, "unavailable") {
		t.Fatalf("fs.read there: %+v, %v; want an unavailable error naming SFTP", rep, err)
	}
	t.Logf("fs.read: %s", strings.TrimSpace(rep.Output.Text))
}

// TestAHostPartitionedPastTheGraceLosesTheKernelAndKeepsNothing: the network to an ssh
// host is cut for good (a short kernel grace, 2 s). The remote kernel, hearing no
// heartbeat, takes its connection for dead and ends by its grace: nothing of it is left
// on the host. The daemon, which cannot tell a host out of reach from a kernel gone,
// keeps trying until the grace and a minute have surely passed, then forgets the record
// without reaching for the host: the session reports the kernel lost, and once the
// network is back its next cell runs on a fresh kernel and says the namespace was lost.
func TestAHostPartitionedPastTheGraceLosesTheKernelAndKeepsNothing(t *testing.T) {
	t.Parallel() // about two and a half minutes of waiting, by the rules
	srv, r, s := partitionedSession(t, ssh.Options{KernelGrace: 2 * time.Second, Heartbeat: 300 * time.Millisecond})
	ctx := context.Background()
	before, err := r.c.Session(ctx, s.ID)
	if err != nil || before.Kernel.PID == nil {
		t.Fatalf("session %+v, %v", before, err)
	}
	pid := *before.Kernel.PID
	srv.Cut(t)
	restored := false
	defer func() {
		if !restored {
			srv.Restore(t)
		}
	}()
	cut := time.Now()
	for testproc.Kill(pid, 0) == nil {
		if time.Since(cut) > 30*time.Second {
			t.Fatalf("the remote kernel %d still runs 30 s into the partition", pid)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the remote kernel ended %v into the partition", time.Since(cut).Round(100*time.Millisecond))
	if testproc.KillGroup(pid, 0) == nil {
		t.Errorf("the kernel's process group %d outlived it", pid)
	}
	var got *api.Session
	for {
		got, err = r.c.Session(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Kernel.State != nil && *got.Kernel.State == "lost" {
			break
		}
		if time.Since(cut) > 5*time.Minute {
			t.Fatalf("5 minutes into the partition the session's kernel is %+v, want lost", got.Kernel)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("the daemon gave the kernel up %v into the partition: %s", time.Since(cut).Round(time.Second), deref(got.Kernel.Lost))
	if elapsed := time.Since(cut); elapsed < 62*time.Second {
		t.Errorf("the kernel was given up %v into the partition, before its grace and a minute", elapsed)
	}
	srv.Restore(t)
	restored = true
	// The first cells after the heal may meet the host's connection still down (each
	// such failure is unavailable, and starts nothing); within a minute one runs.
	var rep *api.CellReply
	for healed := time.Now(); ; time.Sleep(time.Second) {
		rep, err = r.c.RunCell(ctx, s.ID, api.RunCell{Code: "try:\n    x\nexcept NameError:\n    print('fresh')"})
		var ae *api.Error
		if err == nil || !errors.As(err, &ae) || ae.Code != api.CodeUnavailable || time.Since(healed) > time.Minute {
			break
		}
		t.Logf("a cell %v after the heal: %v", time.Since(healed).Round(time.Second), err)
	}
	if err != nil || rep.Cell == nil || rep.Output.Text != "fresh\n" || rep.Lost == nil {
		t.Fatalf("the next cell after the heal: %+v, %v; want a fresh kernel that says the namespace was lost", rep, err)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
