package local

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// TestADetachedKernelTracksOnlyItsLiveJobs: the groups a detached kernel's Kill would end
// are those of its live jobs: a job that ended is forgotten at its job_end (its group id
// may go to another process later), a live one is kept and ended with the kernel.
func TestADetachedKernelTracksOnlyItsLiveJobs(t *testing.T) {
	python := testneed.Python(t)
	tr := New(Options{CacheDir: t.TempDir(), Python: python, RunDir: filepath.Join(t.TempDir(), "run"),
		StdinGrace: 300 * time.Millisecond, TermGrace: 300 * time.Millisecond})
	k, c := transporttest.Start(t, tr, transports.Spec{Dir: t.TempDir()})
	d := k.(*detached)
	if err := c.Job("sleep 30"); err != nil {
		t.Fatal(err)
	}
	if err := c.Job("true"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); d.liveJobs() != 1; {
		if _, err := c.Run("import time; time.sleep(0.05)"); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d job groups tracked, want the one live job", d.liveJobs())
		}
	}
	var pgid int
	d.mu.Lock()
	for _, g := range d.jobs {
		pgid = g.pgid
	}
	d.mu.Unlock()
	transporttest.Stop(t, k)
	if err := testproc.KillGroup(pgid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the live job's group %d outlived its kernel: %v", pgid, err)
	}
}

// hasZombie sees a child that has ended and is not yet reaped, and no longer once it is.
func TestHasZombieSeesAnUnreapedChild(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !hasZombie(os.Getpid()) {
		if time.Now().After(deadline) {
			t.Fatal("an ended, unreaped child is not seen as a zombie")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if hasZombie(os.Getpid()) {
		t.Fatal("a reaped child is still seen as a zombie")
	}
}

// liveJobs is how many job groups the kernel is known to lead.
func (k *detached) liveJobs() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.jobs)
}
