package wrapped_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/internal/procfs"
	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/link"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/transporttest"
	"github.com/kennel-dev/kennel/transports/wrapped"
	"github.com/kennel-dev/kennel/transports/wrapped/wrappedtest"
)

// detachedKernel is what a detached wrapped kernel offers besides transports.Kernel.
type detachedKernel interface {
	transports.Detachable
	Link() *link.Client
}

// startDetached starts a kernel under w (its run directories in the host directory
// root) with env, and returns it, its client and its record.
func startDetached(t *testing.T, w detachedWrapper, tr *wrapped.Transport, env ...string) (detachedKernel, *transporttest.Client, transports.Record) {
	t.Helper()
	spec := transports.Spec{Dir: w.sandboxDir, Env: env}
	if spec.Dir == "" {
		spec.Dir = t.TempDir()
	}
	k, c := transporttest.Start(t, tr, spec)
	dk, ok := k.(detachedKernel)
	if !ok {
		t.Fatalf("a detached kernel (%T) is not Detachable with a Link", k)
	}
	return dk, c, dk.Record()
}

// hostRunDir is where the host sees the run directory of rec, a kernel under w whose
// run directories are in the host directory root.
func (w detachedWrapper) hostRunDir(root string, rec transports.Record) string {
	if w.sandboxDir == "" {
		return rec.RunDir // the plain process wrapper's sandbox is the host
	}
	return filepath.Join(root, rec.Kernel)
}

// kernelAlive reports whether the kernel rec names still runs on the host (its pids
// are the host's under these wrappers).
func kernelAlive(rec transports.Record) bool {
	st, err := procfs.Read(rec.PID)
	return err == nil && st.Start == rec.Leader && !st.Zombie()
}

func reattach(t *testing.T, tr *wrapped.Transport, rec transports.Record) (transports.Kernel, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	k, err := tr.Reattach(ctx, rec)
	if err == nil {
		t.Cleanup(func() { transporttest.Stop(t, k) })
	}
	return k, err
}

// An attach with a wrong token is refused, and changes nothing: the kernel runs on with
// its first connection, its run directory kept, and the refusal is in its kernel.log.
func TestDetachedAttachWithAWrongTokenIsRefused(t *testing.T) {
	for _, w := range detachedWrappers {
		t.Run(w.name, func(t *testing.T) {
			root := t.TempDir()
			k, c, rec := startDetached(t, w, w.make(t, testOptions(), root).Transport)
			run(t, c, "x = 1")
			bad := rec
			bad.Token = strings.Repeat("0", 64)
			if _, err := reattach(t, w.make(t, testOptions(), root).Transport, bad); !errdefs.IsNotFound(err) || !errors.Is(err, link.ErrGone) {
				t.Fatalf("reattach with a wrong token: %v, want link.ErrGone (errdefs.ErrNotFound)", err)
			}
			if out := run(t, c, "print(x + 1)"); out != "2\n" {
				t.Errorf("after the refused attach the kernel printed %q", out)
			}
			if n := k.Link().Attaches(); n != 1 {
				t.Errorf("%d attaches: the refused attach cut the kernel's connection", n)
			}
			log, err := os.ReadFile(filepath.Join(w.hostRunDir(root, rec), "kernel.log"))
			if err != nil || !strings.Contains(string(log), "wrong token") {
				t.Errorf("kernel.log %q, %v: want the refusal logged", log, err)
			}
		})
	}
}

// A kernel let go for longer than its grace (2 s here) with nothing attached ends, and
// with it every process it started, also one a cell detached into a session of its own;
// a reattach then finds no kernel (errdefs.ErrNotFound) and removes its run directory.
func TestADetachedKernelLeftAlonePastItsGraceEnds(t *testing.T) {
	for _, w := range detachedWrappers {
		t.Run(w.name, func(t *testing.T) {
			root := t.TempDir()
			opts := testOptions()
			opts.KernelGrace = 2 * time.Second
			key, value := marker()
			k, c, rec := startDetached(t, w, w.make(t, opts, root).Transport, key+"="+value)
			run(t, c, `import subprocess
subprocess.Popen(["sleep", "1000"], start_new_session=True)`)
			waitMarked(t, key, value, 1) // the kernel's own environ is env -i's
			if !kernelAlive(rec) {
				t.Fatalf("kernel %d is not running", rec.PID)
			}
			if err := k.Detach(); err != nil {
				t.Fatal(err)
			}
			if _, err := k.Wait(); !errors.Is(err, link.ErrDetached) {
				t.Errorf("Wait after Detach: %v, want link.ErrDetached", err)
			}
			began := time.Now()
			for kernelAlive(rec) {
				if time.Since(began) > wait {
					t.Fatalf("the kernel outlived its 2 s grace by %v", wait)
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("kernel gone %v after the detach (grace 2 s)", time.Since(began).Round(10*time.Millisecond))
			if left := eventuallyNoneMarked(key, value, 10*time.Second); len(left) > 0 {
				t.Errorf("processes %v of the kernel outlived it", left)
			}
			if _, err := reattach(t, w.make(t, opts, root).Transport, rec); !errdefs.IsNotFound(err) {
				t.Errorf("reattach to a kernel that ended: %v, want errdefs.ErrNotFound", err)
			}
			if _, err := os.Stat(w.hostRunDir(root, rec)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the run directory of a kernel found gone is still there: %v", err)
			}
		})
	}
}

// commandsHolding lists the host pids whose argv holds every one of args, in order.
func commandsHolding(args ...string) []int {
	want := []byte(strings.Join(args, "\x00") + "\x00")
	var pids []int
	all, _ := procfs.All()
	for _, st := range all {
		b, err := os.ReadFile("/proc/" + itoa(st.PID) + "/cmdline")
		if err == nil && !st.Zombie() && strings.Contains(string(b), string(want)) {
			pids = append(pids, st.PID)
		}
	}
	return pids
}

// Killing a bridge (the start command that forked the kernel, then an attach bridge's
// whole wrapper process group) never ends the kernel: the link reattaches through a fresh
// bridge, and the kernel and its namespace are as they were.
func TestKillingTheBridgeNeverEndsTheKernel(t *testing.T) {
	for _, w := range detachedWrappers {
		t.Run(w.name, func(t *testing.T) {
			k, c, rec := startDetached(t, w, w.make(t, testOptions(), t.TempDir()).Transport)
			run(t, c, "x = 41")
			st, err := procfs.Read(rec.PID)
			if err != nil {
				t.Fatal(err)
			}
			cmdline, _ := os.ReadFile("/proc/" + itoa(st.PPID) + "/cmdline")
			if !strings.Contains(string(cmdline), "python") {
				t.Fatalf("the kernel's parent %d is not its start command: %q", st.PPID, cmdline)
			}
			if err := testproc.Kill(st.PPID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if out := run(t, c, "print(x + 1)"); out != "42\n" {
				t.Fatalf("after the start command was killed the kernel printed %q", out)
			}
			if n := k.Link().Attaches(); n < 2 {
				t.Fatalf("%d attaches after the start command was killed", n)
			}
			// The attach bridge: its wrapper, a child of this test leading its group, and
			// what runs below it (setsid's child leads a session of its own).
			bridges := commandsHolding("attach", rec.RunDir)
			if len(bridges) == 0 {
				t.Fatalf("no attach bridge of %s runs", rec.RunDir)
			}
			for _, pid := range bridges {
				kill := testproc.Kill
				if s, err := procfs.Read(pid); err == nil && s.PPID == os.Getpid() {
					kill = testproc.KillGroup
				}
				if err := kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
					t.Fatal(err)
				}
			}
			if out := run(t, c, "x += 1\nprint(x + 1)"); out != "43\n" {
				t.Fatalf("after the attach bridge was killed the kernel printed %q", out)
			}
			if n := k.Link().Attaches(); n < 3 {
				t.Fatalf("%d attaches after the attach bridge was killed", n)
			}
			if !kernelAlive(rec) {
				t.Fatal("the kernel is not the one that started")
			}
		})
	}
}

// Reattach refuses a record that is not this transport's (errdefs.ErrInvalidArgument:
// another kind's, a run directory outside Options.RunDir, which a cleanup would remove),
// and finds no kernel where none runs (errdefs.ErrNotFound).
func TestReattachWhereNoKernelIsIsNotFound(t *testing.T) {
	w := detachedWrappers[0]
	root := t.TempDir()
	tr := w.make(t, testOptions(), root).Transport
	runDir := tr.Options().RunDir
	good := transports.Record{Transport: wrapped.Name, Kernel: "0123456789abcdef", Token: strings.Repeat("a", 64)}
	good.RunDir = runDir + "/" + good.Kernel
	if _, err := reattach(t, tr, good); !errdefs.IsNotFound(err) {
		t.Errorf("reattach where no kernel is: %v, want errdefs.ErrNotFound", err)
	}
	elsewhere := t.TempDir()
	for name, rec := range map[string]transports.Record{
		"another kind":        {Transport: "local", Kernel: good.Kernel, Token: good.Token, RunDir: good.RunDir},
		"no token":            {Transport: wrapped.Name, Kernel: good.Kernel, RunDir: good.RunDir},
		"outside the root":    {Transport: wrapped.Name, Kernel: filepath.Base(elsewhere), Token: good.Token, RunDir: elsewhere},
		"the root itself":     {Transport: wrapped.Name, Kernel: filepath.Base(runDir), Token: good.Token, RunDir: runDir},
		"not the kernel's id": {Transport: wrapped.Name, Kernel: "other", Token: good.Token, RunDir: good.RunDir},
		"dot-dot":             {Transport: wrapped.Name, Kernel: "..", Token: good.Token, RunDir: runDir + "/.."},
	} {
		if _, err := reattach(t, tr, rec); !errdefs.IsInvalidArgument(err) {
			t.Errorf("%s: %v, want errdefs.ErrInvalidArgument", name, err)
		}
	}
	if _, err := os.Stat(elsewhere); err != nil {
		t.Errorf("a directory outside the run directory root was touched: %v", err)
	}
}

// A run directory deeper than sun_path's 108 bytes works: the kernel binds its socket by
// its relative name and the bridges connect through the directory.
func TestADeepRunDirectoryWorks(t *testing.T) {
	w := detachedWrappers[0]
	root := t.TempDir()
	for len(root) < 120 {
		root = filepath.Join(root, "a-rather-long-directory-name")
	}
	k, c, rec := startDetached(t, w, w.make(t, testOptions(), root).Transport)
	if len(rec.RunDir+"/kernel.sock") < 108 {
		t.Fatalf("run directory %s is not deep enough", rec.RunDir)
	}
	run(t, c, "x = 1")
	k.Link().Drop()
	if out := run(t, c, "print(x + 1)"); out != "2\n" || k.Link().Attaches() < 2 {
		t.Fatalf("after a cut: %q, %d attaches", out, k.Link().Attaches())
	}
}

// Under a wrapper whose pid namespace ends with its first command (bwrap --unshare-pid
// --die-with-parent) a detached kernel ends when its start command does, at the first
// connection's end: its Wait says it was killed from outside, naming the cause.
func TestAWrapperThatEndsItsKernelIsNamed(t *testing.T) {
	testneed.Tools(t, "bwrap")
	dir, root := t.TempDir(), t.TempDir()
	opts := testOptions()
	prefix := wrappedtest.BwrapPrefix(t, dir, wrappedtest.SandboxDir)
	opts.ArgvPrefix = append(prefix[:len(prefix)-1:len(prefix)-1], "--bind", root, wrappedtest.RunRoot, "--")
	opts.RunDir = wrappedtest.RunRoot
	opts.Python = wrappedtest.SandboxPython(t)
	k, err := wrapped.New(opts).Start(t.Context(), transports.Spec{SessionID: "s", Dir: wrappedtest.SandboxDir})
	if err != nil {
		t.Fatal(err)
	}
	c := transporttest.NewClient(k)
	if _, err := c.Hello(); err != nil {
		t.Fatal(err)
	}
	run(t, c, "x = 1")
	k.(detachedKernel).Link().Drop() // the start command's stdin ends: it exits, and its pid namespace
	_, err = k.Wait()
	if !errors.Is(err, wrapped.ErrKilledOutside) || !errdefs.IsAborted(err) {
		t.Fatalf("Wait of a kernel its wrapper killed: %v, want wrapped.ErrKilledOutside", err)
	}
	t.Logf("Wait: %v", err)
}

// Under a wrapper that makes a pid namespace per command (bwrap --unshare-pid alone) the
// kernel outlives its start command but the signal bridges cannot reach it: Kill of a
// kernel that a cell holds past its shutdown says why when ctx ends.
func TestSignalsThatCannotReachTheKernelAreNamed(t *testing.T) {
	testneed.Tools(t, "bwrap")
	dir, root := t.TempDir(), t.TempDir()
	opts := testOptions()
	opts.EOFGrace = 0 // the stub's 30 s: the shutdown does not end the busy kernel
	prefix := wrappedtest.BwrapPrefix(t, dir, wrappedtest.SandboxDir)
	prefix = prefix[: len(prefix)-1 : len(prefix)-1]
	for i, a := range prefix {
		if a == "--die-with-parent" {
			prefix = append(prefix[:i:i], prefix[i+1:]...)
			break
		}
	}
	opts.ArgvPrefix = append(prefix, "--bind", root, wrappedtest.RunRoot, "--")
	opts.RunDir = wrappedtest.RunRoot
	opts.Python = wrappedtest.SandboxPython(t)
	key, value := marker()
	k, c, rec := startDetached(t, detachedWrapper{sandboxDir: wrappedtest.SandboxDir}, wrapped.New(opts), key+"="+value)
	job(t, c, "sleep 1000")
	busy(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := k.Kill(ctx)
	if err == nil || !strings.Contains(err.Error(), "pid namespace") {
		t.Errorf("Kill of a kernel its signals cannot reach: %v, want the pid namespace named", err)
	}
	t.Logf("Kill: %v", err)
	// Its run directory's removal ends it, and its jobs with it.
	if err := os.RemoveAll(filepath.Join(root, rec.Kernel)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := k.Wait(); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Wait after the run directory's removal: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("the kernel outlived its run directory")
	}
	if left := eventuallyNoneMarked(key, value, 10*time.Second); len(left) > 0 {
		t.Errorf("processes %v of the kernel outlived it", left)
	}
}
