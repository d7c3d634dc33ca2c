package ssh_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/link"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/ssh"
	"github.com/kennel-dev/kennel/transports/ssh/sshtest"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// TestDetachedConformance: detached remote kernels, reached over their sockets through the
// connection's streamlocal forwarding, pass the suite every transport passes.
func TestDetachedConformance(t *testing.T) {
	srv := sshtest.Start(t)
	hosts := newHosts(t, srv)
	transporttest.Run(t, func(t *testing.T) transports.Transport {
		return ssh.New(hosts, ssh.Options{Target: sshtest.Alias, Detached: true, StdinGrace: time.Second, TermGrace: time.Second})
	}, transporttest.WithSpec(func(t *testing.T, s *transports.Spec) {
		if err := os.Chmod(s.Dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}))
}

// TestADetachedRemoteKernelOutlivesItsLinkThenItsGrace: Detach leaves the remote kernel
// running; with nothing attached it exits after its 2 s grace and leaves no process.
func TestADetachedRemoteKernelOutlivesItsLinkThenItsGrace(t *testing.T) {
	srv := sshtest.Start(t)
	hosts := newHosts(t, srv)
	tr := ssh.New(hosts, ssh.Options{Target: sshtest.Alias, Detached: true, KernelGrace: 2 * time.Second})
	// Not transporttest.Start: its cleanup kills the kernel this test lets go.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, err := tr.Start(ctx, transports.Spec{SessionID: "grace", Dir: srv.Home})
	if err != nil {
		t.Fatal(err)
	}
	c := transporttest.NewClient(k)
	if _, err := c.Hello(); err != nil {
		t.Fatal(err)
	}
	pid, err := c.Run("import os; print(os.getpid())")
	if err != nil {
		t.Fatal(err)
	}
	var kernel int
	if _, err := fmt.Sscan(pid, &kernel); err != nil {
		t.Fatal(err)
	}
	if err := k.(interface{ Detach() error }).Detach(); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Wait(); !errors.Is(err, link.ErrDetached) {
		t.Fatalf("wait after detach: %v, want link.ErrDetached", err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := testproc.Kill(kernel, 0); err != nil {
		t.Fatalf("the remote kernel %d ended with its link: %v", kernel, err)
	}
	for deadline := time.Now().Add(15 * time.Second); testproc.Kill(kernel, 0) == nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the remote kernel %d outlived its 2 s grace by far", kernel)
		}
	}
}

// TestKillingAKernelOnAHostOutOfReachSaysItsGraceEndsIt: with the host partitioned, Kill
// cannot signal the remote kernel: its error says the host is out of reach and that the
// kernel's own grace ends it there.
func TestKillingAKernelOnAHostOutOfReachSaysItsGraceEndsIt(t *testing.T) {
	srv := sshtest.StartPartitionable(t)
	hosts, err := ssh.NewHosts(ssh.HostsOptions{ConfigFile: srv.ConfigFile, KnownHosts: srv.KnownHosts, AgentSocket: "none", KeepAlive: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hosts.Close() })
	tr := ssh.New(hosts, ssh.Options{Target: sshtest.Alias, Detached: true, KernelGrace: 3 * time.Second, StdinGrace: 200 * time.Millisecond, TermGrace: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, err := tr.Start(ctx, transports.Spec{SessionID: "outofreach", Dir: srv.Home})
	if err != nil {
		t.Fatal(err)
	}
	c := transporttest.NewClient(k)
	hello, err := c.Hello()
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := hello.Fields["pid"].(float64)
	if pid <= 1 {
		t.Fatalf("hello names pid %v", hello.Fields["pid"])
	}
	srv.Cut(t)
	restored := false
	defer func() {
		if !restored {
			srv.Restore(t)
		}
	}()
	kctx, kcancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer kcancel()
	err = k.Kill(kctx)
	if err == nil || !strings.Contains(err.Error(), "out of reach") || !strings.Contains(err.Error(), "grace") {
		t.Fatalf("Kill with the host out of reach: %v; want it to say so and that the kernel's grace ends it", err)
	}
	t.Logf("kill: %v", err)
	// Healed, the host drops the dead connection and the kernel, alone, ends after its
	// grace: nothing is left there.
	srv.Restore(t)
	restored = true
	for deadline := time.Now().Add(60 * time.Second); testproc.Kill(int(pid), 0) == nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the remote kernel %d still runs a minute after the partition healed", int(pid))
		}
	}
}

// TestAKernelPartitionedPastItsGraceEndsThere: the host is cut off and never comes
// back while the controller waits. The remote kernel, hearing no heartbeat for three of
// them, takes its connection for dead, starts its grace and ends there: a controller
// that is gone for good leaves no kernel and no process of its group on the host.
func TestAKernelPartitionedPastItsGraceEndsThere(t *testing.T) {
	srv := sshtest.StartPartitionable(t)
	hosts, err := ssh.NewHosts(ssh.HostsOptions{ConfigFile: srv.ConfigFile, KnownHosts: srv.KnownHosts, AgentSocket: "none", KeepAlive: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hosts.Close() })
	tr := ssh.New(hosts, ssh.Options{Target: sshtest.Alias, Detached: true, KernelGrace: 2 * time.Second, Heartbeat: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, err := tr.Start(ctx, transports.Spec{SessionID: "partitioned", Dir: srv.Home})
	if err != nil {
		t.Fatal(err)
	}
	c := transporttest.NewClient(k)
	hello, err := c.Hello()
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := hello.Fields["pid"].(float64)
	if pid <= 1 {
		t.Fatalf("hello names pid %v", hello.Fields["pid"])
	}
	// A job the kernel started is in a group of its own: it must go too.
	if _, err := c.Run("import subprocess\np = subprocess.Popen(['sleep', '1000'])\nprint(p.pid)"); err != nil {
		t.Fatal(err)
	}
	srv.Cut(t)
	restored := false
	defer func() {
		if !restored {
			srv.Restore(t)
		}
	}()
	start := time.Now()
	for testproc.Kill(int(pid), 0) == nil {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the remote kernel %d still runs 30 s into the partition (heartbeat 0.3 s, grace 2 s)", int(pid))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the partitioned kernel ended %v into the partition", time.Since(start).Round(100*time.Millisecond))
	for testproc.KillGroup(int(pid), 0) == nil {
		if time.Since(start) > 35*time.Second {
			t.Fatalf("the kernel's process group %d outlived it", int(pid))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Healed, the controller's Kill finds nothing left to end.
	srv.Restore(t)
	restored = true
	kctx, kcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer kcancel()
	if err := k.Kill(kctx); err != nil {
		t.Logf("kill after the heal: %v", err)
	}
}
