package docker_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
)

// childController plays a controller that runs five sessions and is then killed with
// SIGKILL by the test: it prints each container id, then "ready", then blocks.
func childController() int {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tr, err := docker.New(cli, docker.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var ks []transports.Kernel
	for i := range 5 {
		k, err := tr.Start(context.Background(), transports.Spec{SessionID: fmt.Sprintf("child-%d", i), Dir: "/tmp"})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		// Read the hello: the kernel runs.
		line, err := bufio.NewReader(k.Stdout()).ReadString('\n')
		if err != nil || !strings.Contains(line, `"hello"`) {
			fmt.Fprintln(os.Stderr, "no hello:", line, err)
			return 1
		}
		fmt.Println(k.Info().ID)
		ks = append(ks, k)
	}
	fmt.Println("ready")
	select {}
}

// childSweep plays the next controller's start: it sweeps and prints what it removed.
func childSweep() int {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	res, err := docker.Sweep(context.Background(), cli, docker.SweepOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, id := range res.Removed {
		fmt.Println(id)
	}
	return 0
}

// TestSigkilledControllerLeavesNone: a controller killed with SIGKILL while five sessions
// run leaves no container after the next controller starts (Sweep), and that sweep does
// not touch the containers of a controller that is still alive (this test process).
func TestSigkilledControllerLeavesNone(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	// A live controller's kernel: this process's.
	tr := newTransport(t, cli, docker.Options{})
	mine, err := tr.Start(context.Background(), transports.Spec{SessionID: "live", Dir: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = mine.Kill(context.Background())
		_, _ = mine.Wait()
	})
	go func() { _, _ = bufio.NewReader(mine.Stdout()).WriteTo(discard{}) }()

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"=controller")
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	var ids []string
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "ready" {
		ids = append(ids, sc.Text())
	}
	if len(ids) != 5 {
		_ = child.Process.Kill()
		_ = child.Wait()
		t.Fatalf("child controller started %d kernels: %v", len(ids), ids)
	}
	_ = child.Process.Signal(syscall.SIGKILL)
	_ = child.Wait()
	ctx := context.Background()
	// Left behind: its stdin closed with the connection, so each stub exited, but the
	// containers are still there.
	if n := countContainers(t, cli, ids); n != 5 {
		t.Logf("%d of 5 containers left before the sweep", n)
	}
	sweeper := exec.Command(os.Args[0], "-test.run=^$")
	sweeper.Env = append(os.Environ(), childEnv+"=sweep")
	sweeper.Stderr = os.Stderr
	removed, err := sweeper.Output()
	if err != nil {
		t.Fatalf("sweep: %v", err)
	}
	if n := countContainers(t, cli, ids); n != 0 {
		t.Errorf("%d containers of the killed controller left after the sweep (removed: %q)", n, removed)
	}
	if strings.Contains(string(removed), mine.Info().ID) {
		t.Errorf("the sweep removed a live controller's container")
	}
	if _, err := cli.ContainerInspect(ctx, mine.Info().ID, client.ContainerInspectOptions{}); err != nil {
		t.Errorf("a live controller's container after another's sweep: %v", err)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// countContainers counts how many of ids still exist.
func countContainers(t *testing.T, cli *client.Client, ids []string) int {
	t.Helper()
	n := 0
	for _, id := range ids {
		if _, err := cli.ContainerInspect(context.Background(), id, client.ContainerInspectOptions{}); err == nil {
			n++
		}
	}
	return n
}

// TestStartKillCycles: 50 start/kill cycles (five at a time) leave no container.
func TestStartKillCycles(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	tr := newTransport(t, cli, docker.Options{StdinGrace: 5 * time.Second})
	session := fmt.Sprintf("cycle-%d", os.Getpid())
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	sem := make(chan struct{}, 5)
	for i := range 50 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			k, err := tr.Start(ctx, transports.Spec{SessionID: session, Dir: "/tmp"})
			if err != nil {
				errs <- err
				return
			}
			rd := bufio.NewReader(k.Stdout())
			if i%2 == 0 {
				// Half are killed once their hello came, half at once.
				if line, err := rd.ReadString('\n'); err != nil || !strings.Contains(line, `"hello"`) {
					errs <- fmt.Errorf("no hello: %q, %v", line, err)
				}
			}
			go func() { _, _ = rd.WriteTo(discard{}) }()
			if err := k.Kill(ctx); err != nil {
				errs <- err
			}
			if _, err := k.Wait(); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	list, err := cli.ContainerList(context.Background(), client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", docker.LabelSession+"="+session),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("%d containers left after 50 start/kill cycles", len(list.Items))
	}
}
