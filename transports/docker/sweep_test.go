package docker_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
)

// ownerLabels are the labels Sweep reads, as the package documents them, for a container
// of controller c in session.
func ownerLabels(c docker.Controller, session string) map[string]string {
	return map[string]string{
		docker.LabelKennel:     "1",
		docker.LabelSession:    session,
		docker.LabelController: c.ID(),
		docker.LabelHost:       c.Host,
		docker.LabelBoot:       c.Boot,
		docker.LabelPID:        strconv.Itoa(c.PID),
		docker.LabelStart:      strconv.FormatUint(c.Start, 10),
	}
}

// TestSweepEngine: the start-up sweep (SweepEngine, the engine from the environment)
// removes the running containers of controllers of this host that are gone (a pid that
// cannot exist, a live pid with another start time, another boot), and keeps those of
// live controllers (this test process, its parent) and of another host.
func TestSweepEngine(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	self, err := docker.Self()
	if err != nil {
		t.Fatal(err)
	}
	parent, err := docker.Process(os.Getppid())
	if err != nil {
		t.Fatal(err)
	}
	// The boxes and this sweep name a host of the test's own: every other controller's
	// sweep on this engine (other packages' tests run beside this one) sees them as another
	// host's and keeps them, so only this sweep decides on them.
	host := self.Host + "-sweeptest-" + strconv.Itoa(os.Getpid())
	self.Host, parent.Host = host, host
	gone := self
	gone.PID = 1 << 22 // PID_MAX_LIMIT: never a pid
	reused := parent
	reused.Start++
	rebooted := parent
	rebooted.Boot = "00000000-0000-0000-0000-000000000000"
	elsewhere := gone
	elsewhere.Host = self.Host + "-elsewhere"
	session := "sweep-" + strconv.Itoa(os.Getpid())
	boxes := []struct {
		name string
		c    docker.Controller
		kept bool
	}{
		{"gone pid", gone, false},
		{"reused pid", reused, false},
		{"rebooted host", rebooted, false},
		{"this process", self, true},
		{"live parent", parent, true},
		{"another host", elsewhere, true},
	}
	ids := make([]string, len(boxes))
	for i, b := range boxes {
		ids[i] = sleepingBox(t, cli, ownerLabels(b.c, session)) // as a kernel of controller b.c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := docker.SweepEngine(ctx, docker.EngineSweepOptions{Self: self})
	if err != nil {
		t.Fatal(err)
	}
	removed := map[string]bool{}
	for _, id := range res.Removed {
		removed[id] = true
	}
	for i, b := range boxes {
		_, err := cli.ContainerInspect(ctx, ids[i], client.ContainerInspectOptions{})
		exists := err == nil
		if exists != b.kept || removed[ids[i]] == b.kept {
			t.Errorf("%s: container exists %v (inspect: %v), listed removed %v; want kept %v", b.name, exists, err, removed[ids[i]], b.kept)
		}
	}
	if res.Kept < 3 {
		t.Errorf("kept %d containers, want at least the 3 of live or remote controllers", res.Kept)
	}
}

// TestSweepEngineNoEngine: with no engine to reach (no socket where DOCKER_HOST points,
// or an engine that accepts and never answers) the start-up sweep ends quickly with an
// error matching transports.ErrUnavailable.
func TestSweepEngineNoEngine(t *testing.T) {
	dir := t.TempDir()
	t.Run("no socket", func(t *testing.T) {
		t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(dir, "absent.sock"))
		start := time.Now()
		_, err := docker.SweepEngine(context.Background(), docker.EngineSweepOptions{})
		took := time.Since(start)
		t.Logf("%v in %v", err, took)
		if !errors.Is(err, transports.ErrUnavailable) {
			t.Errorf("sweep with no engine: %v, want transports.ErrUnavailable", err)
		}
		if took > 10*time.Second {
			t.Errorf("sweep with no engine took %v", took)
		}
	})
	t.Run("hung engine", func(t *testing.T) {
		sock := filepath.Join(dir, "hung.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		held := make(chan net.Conn, 16)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					close(held)
					return
				}
				held <- c // accepted, never answered
			}
		}()
		defer func() {
			ln.Close()
			for c := range held {
				c.Close()
			}
		}()
		start := time.Now()
		_, err = docker.SweepEngine(context.Background(), docker.EngineSweepOptions{ConnectOptions: docker.ConnectOptions{
			Client:      []client.Opt{client.WithHost("unix://" + sock)},
			PingTimeout: 500 * time.Millisecond,
		}})
		took := time.Since(start)
		t.Logf("%v in %v", err, took)
		if !errors.Is(err, transports.ErrUnavailable) {
			t.Errorf("sweep of a hung engine: %v, want transports.ErrUnavailable", err)
		}
		if took > 10*time.Second {
			t.Errorf("sweep of a hung engine took %v", took)
		}
	})
}
