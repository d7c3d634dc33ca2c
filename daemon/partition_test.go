package daemon_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/api"
	kclient "github.com/kennel-dev/kennel/client"
	"github.com/kennel-dev/kennel/daemon"
	"github.com/kennel-dev/kennel/launch"
	"github.com/kennel-dev/kennel/transports/ssh"
	"github.com/kennel-dev/kennel/transports/ssh/sshtest"
)

// TestAPartitionedHostKeepsItsKernel: the network between the daemon and an ssh host (a
// real sshd in a network namespace of its own, reached over veth) is cut for 20 s while
// a cell runs there, then restored: the cell's output arrives once, and the namespace is
// kept (the same kernel, never replaced by a fresh one while it may run).
func TestAPartitionedHostKeepsItsKernel(t *testing.T) {
	srv := sshtest.StartPartitionable(t)
	state := filepath.Join(shortDir(t), "state")
	kit := launch.New(launch.Options{
		RunDir: daemon.KernelRunDir(state),
		Hosts:  ssh.HostsOptions{ConfigFile: srv.ConfigFile, KnownHosts: srv.KnownHosts, AgentSocket: "none", KeepAlive: time.Second},
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
