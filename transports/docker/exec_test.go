package docker_test

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// remoteEngine is the machine's engine seen as a remote one: the pid an exec inspect
// reports is another machine's, here that of an unrelated process of this host.
type remoteEngine struct {
	client.APIClient
	pid int
}

func (r remoteEngine) ExecInspect(ctx context.Context, id string, o client.ExecInspectOptions) (client.ExecInspectResult, error) {
	res, err := r.APIClient.ExecInspect(ctx, id, o)
	if res.PID > 0 {
		res.PID = r.pid
	}
	return res, err
}

// TestExecKillSignalsNoHostPid: exec mode ends a kernel whose cell holds it past the
// stdin grace through its container, never by a signal to the pid the engine reports
// (on a remote engine, some process of the controller's host): the process under that
// pid here lives on, and the kernel ends by the TERM within 10 s.
func TestExecKillSignalsNoHostPid(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	box := sleepingBox(t, cli, map[string]string{"dev.kennel.test": "box"}) // an operator's box, for `docker exec -i box`
	bystander := exec.Command("sleep", "1000")
	if err := bystander.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = bystander.Process.Kill(); _ = bystander.Wait() }()
	exited := make(chan struct{})
	go func() { _, _ = bystander.Process.Wait(); close(exited) }()

	tr := newTransport(t, remoteEngine{cli, bystander.Process.Pid}, docker.Options{
		Container: box, StdinGrace: 300 * time.Millisecond, StopGrace: 20 * time.Second})
	k, c := transporttest.Start(t, tr, transports.Spec{Dir: "/tmp"})
	hold(t, c, "import time\nprint('holding', flush=True)\ntime.sleep(600)")
	go func() { _ = c.End(time.Minute) }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	if err := k.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	exit, err := k.Wait()
	took := time.Since(start)
	t.Logf("Kill returned in %v: %+v, %v", took, exit, err)
	select {
	case <-exited:
		t.Errorf("Kill signalled process %d of this host, the pid the engine reported", bystander.Process.Pid)
	case <-time.After(200 * time.Millisecond):
	}
	if err != nil || !exit.Killed || exit.Code != 128+int(syscall.SIGTERM) {
		t.Errorf("exit %+v, %v; want killed by the TERM (code 143)", exit, err)
	}
	if took > 10*time.Second {
		t.Errorf("Kill took %v, want the TERM to end it within 10 s", took)
	}
}
