package docker_test

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// TestKillRemovesContainerWithinGrace: Kill's graceful stages end a container kernel
// and remove its container before Kill returns: an idle kernel at stdin EOF (exit 0,
// well within the stdin grace), one whose cell holds the main thread at the stop
// stage's SIGTERM (exit 143, long before the SIGKILL of a 20 s stop grace).
func TestKillRemovesContainerWithinGrace(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	const stdinGrace, stopGrace = 5 * time.Second, 20 * time.Second
	tr := newTransport(t, cli, docker.Options{StdinGrace: stdinGrace, StopGrace: stopGrace})
	cases := []struct {
		name  string
		cell  string // sent and left running before Kill; "" for none
		code  int
		bound time.Duration
	}{
		{"idle", "", 0, stdinGrace},
		{"busy cell", "import time\nprint('holding', flush=True)\ntime.sleep(600)", 143, stdinGrace + stopGrace/2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k, cl := transporttest.Start(t, tr, transports.Spec{Dir: "/tmp"})
			if c.cell != "" {
				hold(t, cl, c.cell)
			}
			go func() { _ = cl.End(time.Minute) }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := time.Now()
			if err := k.Kill(ctx); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			_, err := cli.ContainerInspect(context.Background(), k.Info().ID, client.ContainerInspectOptions{})
			exit, werr := k.Wait()
			t.Logf("Kill returned in %v: %+v", took, exit)
			if !cerrdefs.IsNotFound(err) {
				t.Errorf("the container after Kill returned: inspect %v, want it removed", err)
			}
			if werr != nil {
				t.Errorf("wait: %v", werr)
			}
			if exit.Code != c.code || exit.OOM || !exit.Killed {
				t.Errorf("exit %+v, want code %d, killed", exit, c.code)
			}
			if took > c.bound {
				t.Errorf("Kill took %v, want under %v", took, c.bound)
			}
		})
	}
}

// TestKillEndsAKernelWhoseStdoutIsNotRead: a caller that stops reading the kernel's
// Stdout (a controller shutting down) does not keep Kill and Wait from ending, nor the
// container from being removed, though the kernel is blocked writing frames nobody reads;
// Stdout then ends for a late reader. Run and exec mode, each within 15 s.
func TestKillEndsAKernelWhoseStdoutIsNotRead(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	box := sleepingBox(t, cli, map[string]string{"dev.kennel.test": "box"}) // an operator's box, for `docker exec -i box`
	for _, c := range []struct {
		name string
		opts docker.Options
	}{{"run", docker.Options{}}, {"exec", docker.Options{Container: box}}} {
		t.Run(c.name, func(t *testing.T) {
			tr := newTransport(t, cli, c.opts)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			k, err := tr.Start(ctx, transports.Spec{SessionID: "unread-" + c.name, Dir: "/tmp"})
			if err != nil {
				t.Fatal(err)
			}
			out := bufio.NewReader(k.Stdout())
			if hello, err := out.ReadString('\n'); err != nil || !strings.Contains(hello, `"hello"`) {
				t.Fatalf("hello %q, %v", hello, err)
			}
			cell := `{"type":"execute","id":"c1","code":"while True: print('x' * 65536, flush=True)"}` + "\n"
			if _, err := io.WriteString(k.Stdin(), cell); err != nil {
				t.Fatal(err)
			}
			time.Sleep(500 * time.Millisecond) // the kernel fills what holds its output, then blocks
			kctx, kcancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer kcancel()
			start := time.Now()
			kerr := k.Kill(kctx)
			waited := make(chan struct{})
			go func() { _, _ = k.Wait(); close(waited) }()
			select {
			case <-waited:
			case <-time.After(15*time.Second - time.Since(start)):
				t.Fatalf("Wait has not returned %v after Kill (Kill: %v)", time.Since(start), kerr)
			}
			t.Logf("Kill and Wait returned in %v", time.Since(start))
			if kerr != nil {
				t.Errorf("kill: %v", kerr)
			}
			if c.opts.Container == "" {
				if _, err := cli.ContainerInspect(context.Background(), k.Info().ID, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
					t.Errorf("the container after Wait: inspect %v, want it removed", err)
				}
			}
			if _, err := io.Copy(io.Discard, out); err != nil {
				t.Errorf("a late read of Stdout: %v, want it to end with EOF", err)
			}
		})
	}
}
