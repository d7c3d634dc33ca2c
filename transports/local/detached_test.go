package local_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/local"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// newDetached makes a Transport whose kernels are detached, under a run root of the test.
func newDetached(t testing.TB, grace time.Duration) *local.Transport {
	p := needPython(t)
	return local.New(local.Options{
		CacheDir: t.TempDir(), Python: p, RunDir: filepath.Join(t.TempDir(), "run"), KernelGrace: grace,
		StdinGrace: 500 * time.Millisecond, TermGrace: 500 * time.Millisecond,
	})
}

// TestDetachedConformance: a detached local kernel, reached over its link, passes the
// suite every transport passes (cells, env, cwd, stdin EOF as shutdown, kill leaves
// nothing).
func TestDetachedConformance(t *testing.T) {
	// One run directory per case: a case's later Transport (a restarted controller)
	// reattaches to what its first one started.
	runs := map[testing.TB]string{}
	transporttest.Run(t, func(t *testing.T) transports.Transport {
		if runs[t] == "" {
			runs[t] = filepath.Join(t.TempDir(), "run")
		}
		return local.New(local.Options{
			CacheDir: t.TempDir(), Python: needPython(t), RunDir: runs[t],
			StdinGrace: 500 * time.Millisecond, TermGrace: 500 * time.Millisecond,
		})
	})
}

type linkKernel interface {
	transports.Kernel
	transports.Detachable
}

func startDetached(t *testing.T, tr *local.Transport) (linkKernel, *transporttest.Client) {
	t.Helper()
	k, c := transporttest.Start(t, tr, transports.Spec{Dir: t.TempDir()})
	lk, ok := k.(linkKernel)
	if !ok {
		t.Fatalf("a detached kernel is a %T, not a Detacher", k)
	}
	return lk, c
}

// TestADetachedKernelOutlivesItsLinkThenItsGrace: Detach leaves the kernel running; with
// nothing attached it exits after its grace (2 s), leaving no process.
func TestADetachedKernelOutlivesItsLinkThenItsGrace(t *testing.T) {
	k, c := startDetached(t, newDetached(t, 2*time.Second))
	if _, err := c.Run("y = 2"); err != nil {
		t.Fatal(err)
	}
	pid := k.Info().PID
	if err := k.Detach(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := testproc.Kill(pid, 0); err != nil {
		t.Fatalf("the kernel ended with its link: %v", err)
	}
	done := make(chan struct{})
	go func() { _, _ = k.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the kernel outlived its 2 s grace by far")
	}
	if err := testproc.KillGroup(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the kernel's group is still there: %v", err)
	}
}

// TestRemovingTheRunDirectoryEndsTheKernel: a kernel whose run directory goes exits
// within about a second.
func TestRemovingTheRunDirectoryEndsTheKernel(t *testing.T) {
	k, c := startDetached(t, newDetached(t, 0))
	if _, err := c.Run("z = 3"); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(k.Record().RunDir); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	done := make(chan struct{})
	go func() { _, _ = k.Wait(); close(done) }()
	select {
	case <-done:
		t.Logf("ended %v after its run directory went", time.Since(start).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("the kernel outlived its run directory")
	}
}

// TestADetachedKernelsRunDirectoryIsPrivate: the run directory, its log and its socket
// are the controller's user's alone; the record names them.
func TestADetachedKernelsRunDirectoryIsPrivate(t *testing.T) {
	k, _ := startDetached(t, newDetached(t, 0))
	rec := k.Record()
	for path, want := range map[string]os.FileMode{rec.RunDir: 0o700 | os.ModeDir, filepath.Join(rec.RunDir, "kernel.log"): 0o600} {
		fi, err := os.Stat(path)
		if err != nil || fi.Mode()&(os.ModePerm|os.ModeDir) != want {
			t.Errorf("%s: %v, %v; want %v", path, fi.Mode(), err, want)
		}
	}
	fi, err := os.Stat(filepath.Join(rec.RunDir, "kernel.sock"))
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("kernel.sock: %v, %v", fi.Mode(), err)
	}
	if len(rec.Token) != 64 || rec.Kernel == "" || filepath.Base(rec.RunDir) != rec.Kernel {
		t.Errorf("record %+v", rec)
	}
}
