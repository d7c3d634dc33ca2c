package docker_test

import (
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	"github.com/kennel-dev/kennel/link"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// execRunRoot is where exec-mode detached kernels make their run directories in the box.
const execRunRoot = "/tmp/kennel-run"

// detachedExec is a detached kernel of exec mode, with its link.
type detachedExec interface {
	transports.Detachable
	Link() *link.Client
}

func execDetachedOptions(box string) docker.Options {
	return docker.Options{Container: box, RunDir: execRunRoot}
}

// startExecDetached starts an exec-mode detached kernel in box and returns it, its client
// and its record.
func startExecDetached(t *testing.T, tr transports.Transport) (detachedExec, *transporttest.Client, transports.Record) {
	t.Helper()
	k, c := transporttest.Start(t, tr, transports.Spec{Dir: "/tmp"})
	dk, ok := k.(detachedExec)
	if !ok {
		t.Fatalf("a detached exec-mode kernel (%T) is not Detachable with a Link", k)
	}
	rec := dk.Record()
	if rec.Where == "" || !strings.HasPrefix(rec.RunDir, execRunRoot+"/") {
		t.Fatalf("record %+v: want the container as Where and a run directory under %s", rec, execRunRoot)
	}
	return dk, c, rec
}

// inBox runs a Python program in the box (as its user) and returns its stdout.
func inBox(t *testing.T, cli *client.Client, box, program string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	created, err := cli.ExecCreate(ctx, box, client.ExecCreateOptions{
		AttachStdout: true, AttachStderr: true,
		Cmd: append([]string{"python3", "-I", "-S", "-c", program}, args...),
	})
	if err != nil {
		t.Fatal(err)
	}
	att, err := cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	var out, errb strings.Builder
	if _, err := stdcopy.StdCopy(&out, &errb, att.Reader); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if errb.Len() > 0 {
		t.Logf("in the box: %s", errb.String())
	}
	return out.String()
}

// kernelInBox reports whether the kernel rec names still runs in the box (its pid with its
// start time, not a zombie).
func kernelInBox(t *testing.T, cli *client.Client, box string, rec transports.Record) bool {
	t.Helper()
	return inBox(t, cli, box, `import sys
try:
    rest = open("/proc/%s/stat" % sys.argv[1], "rb").read().rpartition(b")")[2].split()
    print(rest[0] != b"Z" and rest[19].decode() == sys.argv[2])
except OSError:
    print(False)`, strconv.Itoa(rec.PID), strconv.FormatUint(rec.Leader, 10)) == "True\n"
}

// boxPIDs lists the pids in the box whose argv holds every one of args, in order.
func boxPIDs(t *testing.T, cli *client.Client, box string, args ...string) []string {
	t.Helper()
	out := inBox(t, cli, box, `import os, sys
want = "\0".join(sys.argv[1:]).encode() + b"\0"
me = str(os.getpid())
for name in os.listdir("/proc"):
    if name.isdigit() and name != me:
        try:
            if want in open("/proc/%s/cmdline" % name, "rb").read():
                print(name)
        except OSError:
            pass`, args...)
	return strings.Fields(out)
}

// An attach with a wrong token is refused (errdefs.ErrNotFound) and changes nothing: the
// kernel answers on its first connection.
func TestExecDetachedWrongTokenIsRefused(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	box := sleepingBox(t, cli, map[string]string{"dev.kennel.test": "box"})
	k, c, rec := startExecDetached(t, newTransport(t, cli, execDetachedOptions(box)))
	if _, err := c.Run("x = 1"); err != nil {
		t.Fatal(err)
	}
	rec.Token = strings.Repeat("0", 64)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if k2, err := newTransport(t, cli, execDetachedOptions(box)).Reattach(ctx, rec); !cerrdefs.IsNotFound(err) {
		if k2 != nil {
			transporttest.Stop(t, k2)
		}
		t.Fatalf("reattach with a wrong token: %v, want errdefs.ErrNotFound", err)
	}
	if out, err := c.Run("print(x + 1)"); err != nil || out != "2\n" {
		t.Fatalf("after the refused attach: %q, %v", out, err)
	}
	if n := k.Link().Attaches(); n != 1 {
		t.Errorf("%d attaches: the refused attach cut the kernel's connection", n)
	}
}

// A kernel let go past its 2 s grace ends with every process it started (one a cell
// detached into a session of its own too); a reattach then finds it gone
// (errdefs.ErrNotFound) and its run directory is removed.
func TestExecDetachedKernelLeftAlonePastItsGraceEnds(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	box := sleepingBox(t, cli, map[string]string{"dev.kennel.test": "box"})
	o := execDetachedOptions(box)
	o.KernelGrace = 2 * time.Second
	k, c, rec := startExecDetached(t, newTransport(t, cli, o))
	if _, err := c.Run(`import subprocess
subprocess.Popen(["sleep", "1037"], start_new_session=True)`); err != nil {
		t.Fatal(err)
	}
	if len(boxPIDs(t, cli, box, "sleep", "1037")) != 1 || !kernelInBox(t, cli, box, rec) {
		t.Fatal("the kernel and its sleeper do not run")
	}
	if err := k.Detach(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	for kernelInBox(t, cli, box, rec) {
		if time.Since(began) > 30*time.Second {
			t.Fatal("the kernel outlived its 2 s grace by 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("kernel gone %v after the detach (grace 2 s)", time.Since(began).Round(10*time.Millisecond))
	for deadline := time.Now().Add(10 * time.Second); len(boxPIDs(t, cli, box, "sleep", "1037")) > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the kernel's sleeper outlived it")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if k2, err := newTransport(t, cli, o).Reattach(ctx, rec); !cerrdefs.IsNotFound(err) {
		if k2 != nil {
			transporttest.Stop(t, k2)
		}
		t.Fatalf("reattach to a kernel that ended: %v, want errdefs.ErrNotFound", err)
	}
	if got := inBox(t, cli, box, "import os, sys\nprint(os.path.exists(sys.argv[1]))", rec.RunDir); got != "False\n" {
		t.Errorf("the run directory of a kernel found gone: exists %s", got)
	}
}

// Killing a bridge (the start exec that forked the kernel, then an attach exec) never
// ends the kernel: the link reattaches through a fresh exec, the namespace intact.
func TestExecKillingTheBridgeNeverEndsTheKernel(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	box := sleepingBox(t, cli, map[string]string{"dev.kennel.test": "box"})
	k, c, rec := startExecDetached(t, newTransport(t, cli, execDetachedOptions(box)))
	if _, err := c.Run("x = 41"); err != nil {
		t.Fatal(err)
	}
	killIn := func(pids ...string) {
		inBox(t, cli, box, "import os, sys\nfor p in sys.argv[1:]: os.kill(int(p), 9)", pids...)
	}
	parent := strings.TrimSpace(inBox(t, cli, box, `import sys
print(open("/proc/%s/stat" % sys.argv[1], "rb").read().rpartition(b")")[2].split()[1].decode())`, strconv.Itoa(rec.PID)))
	killIn(parent)
	if out, err := c.Run("print(x + 1)"); err != nil || out != "42\n" {
		t.Fatalf("after the start exec was killed: %q, %v", out, err)
	}
	if n := k.Link().Attaches(); n < 2 {
		t.Fatalf("%d attaches after the start exec was killed", n)
	}
	bridges := boxPIDs(t, cli, box, "attach", rec.RunDir)
	if len(bridges) == 0 {
		t.Fatal("no attach bridge runs")
	}
	killIn(bridges...)
	if out, err := c.Run("x += 1\nprint(x + 1)"); err != nil || out != "43\n" {
		t.Fatalf("after the attach exec was killed: %q, %v", out, err)
	}
	if n := k.Link().Attaches(); n < 3 {
		t.Fatalf("%d attaches after the attach exec was killed", n)
	}
	if !kernelInBox(t, cli, box, rec) {
		t.Fatal("the kernel is not the one that started")
	}
}

// Reattach finds no kernel where none runs (a run directory with none, a container
// that is gone), errdefs.ErrNotFound, and refuses a record that is not one of the
// transport's (errdefs.ErrInvalidArgument).
func TestExecReattachWhereNoKernelIsIsNotFound(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	box := sleepingBox(t, cli, map[string]string{"dev.kennel.test": "box"})
	tr := newTransport(t, cli, execDetachedOptions(box))
	rec := transports.Record{Transport: docker.Name, Kernel: "0123456789abcdef", Token: strings.Repeat("a", 64), Where: box}
	rec.RunDir = execRunRoot + "/" + rec.Kernel
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := tr.Reattach(ctx, rec); !cerrdefs.IsNotFound(err) {
		t.Errorf("reattach where no kernel is: %v, want errdefs.ErrNotFound", err)
	}
	gone := rec
	gone.Where = "kennel-no-such-container"
	if _, err := tr.Reattach(ctx, gone); !cerrdefs.IsNotFound(err) {
		t.Errorf("reattach in a container that is gone: %v, want errdefs.ErrNotFound", err)
	}
	for name, bad := range map[string]transports.Record{
		"no container":     {Transport: docker.Name, Kernel: rec.Kernel, Token: rec.Token, RunDir: rec.RunDir},
		"outside the root": {Transport: docker.Name, Kernel: "etc", Token: rec.Token, RunDir: "/etc", Where: box},
		"another kind":     {Transport: "wrapped", Kernel: rec.Kernel, Token: rec.Token, RunDir: rec.RunDir, Where: box},
	} {
		if _, err := tr.Reattach(ctx, bad); !cerrdefs.IsInvalidArgument(err) {
			t.Errorf("%s: %v, want errdefs.ErrInvalidArgument", name, err)
		}
	}
}

// An exec's connection keeps net.Conn's deadlines: a read deadline that passed wakes a
// Read with os.ErrDeadlineExceeded, and once cleared the next Read goes on with the
// stream (the link hands a connection's reading between goroutines that way).
func TestAnExecKeepsNetConnDeadlines(t *testing.T) {
	cli := dockerneed.KernelEngine(t)
	box := sleepingBox(t, cli, map[string]string{"dev.kennel.test": "box"})
	p, err := docker.ExecProcForTest(newTransport(t, cli, docker.Options{Container: box}), box, []string{"cat"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	buf := make([]byte, 16)
	roundTrip := func(s string) {
		t.Helper()
		if _, err := io.WriteString(p, s); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(p, buf[:len(s)]); err != nil || string(buf[:len(s)]) != s {
			t.Fatalf("read %q, %v; want %q", buf[:len(s)], err, s)
		}
	}
	roundTrip("a\n")
	if err := p.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v", err)
	}
	if err := p.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	roundTrip("b\n")
}
