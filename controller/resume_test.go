package controller_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/local"
)

// TestADetachedSessionIsResumedWithItsNamespace: a session let go of (Detach) leaves its
// kernel running; a later controller, with the session's id, an IDBase past the earlier
// ids and the record, resumes it: same namespace, the cell in flight at the detach failed
// with ErrDetached for the first controller. A record whose kernel was killed gives a
// fresh kernel and says the namespace was lost.
func TestADetachedSessionIsResumedWithItsNamespace(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	transport := func() *local.Transport { return local.New(local.Options{RunDir: run}) }
	var kept []transports.Record
	dir := t.TempDir()
	first := startSession(t, controller.Options{Transport: transport(), Dir: dir, ID: "resumed1",
		OnKernel: func(rec transports.Record) { kept = append(kept, rec) }})
	if len(kept) != 1 || kept[0].Kernel == "" {
		t.Fatalf("OnKernel told %v, want the first kernel's record", kept)
	}
	execute(t, first, "x = 5")
	inflight := make(chan error, 1)
	go func() {
		_, err := first.Execute(context.Background(), "import time; time.sleep(2)", &captureSink{})
		inflight <- err
	}()
	time.Sleep(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rec, ok, err := first.Detach(ctx)
	if err != nil || !ok {
		t.Fatalf("detach: ok %v, %v", ok, err)
	}
	if err := <-inflight; !errors.Is(err, controller.ErrDetached) {
		t.Fatalf("the cell in flight at the detach: %v, want ErrDetached", err)
	}

	second := startSession(t, controller.Options{Transport: transport(), Dir: dir, ID: "resumed1", IDBase: 1 << 20, Resume: &rec})
	if o := second.Origin(); !o.Resumed || o.Lost != nil {
		t.Fatalf("origin %+v, want resumed", o)
	}
	if second.ID() != "resumed1" {
		t.Fatalf("resumed session's id %q", second.ID())
	}
	// The cell the first controller left runs on; the next one waits for it.
	res, _ := execute(t, second, "x + 1")
	if res.Status != "ok" || res.Result == nil || *res.Result != "6" {
		t.Fatalf("x + 1 in the resumed kernel: %+v (%+v)", res, res.Error)
	}
	hello, _, _ := second.Kernel()
	rec2, ok := second.Record()
	if !ok || rec2.PID != rec.PID || hello.PID != rec.PID {
		t.Fatalf("the resumed kernel is pid %d (record %d), the detached one was %d", hello.PID, rec2.PID, rec.PID)
	}
	if err := second.Close(ctx); err != nil {
		t.Fatal(err)
	}

	third := startSession(t, controller.Options{Transport: transport(), Dir: dir, ID: "resumed1", IDBase: 2 << 20, Resume: &rec2})
	o := third.Origin()
	if o.Resumed || !errdefs.IsNotFound(o.Lost) {
		t.Fatalf("origin of a killed kernel's record: %+v, want lost (not found)", o)
	}
	res, _ = execute(t, third, "'x' in dir()")
	if res.Result == nil || *res.Result != "False" {
		t.Fatalf("a fresh kernel after a lost one still has x: %+v", res)
	}
}

// flaky is a Reattacher whose first fails reattaches find the kernel out of reach.
type flaky struct {
	*local.Transport
	mu    sync.Mutex
	fails int
	calls int
}

func (f *flaky) Reattach(ctx context.Context, rec transports.Record) (transports.Kernel, error) {
	f.mu.Lock()
	f.calls++
	fail := f.calls <= f.fails
	f.mu.Unlock()
	if fail {
		return nil, fmt.Errorf("host down (test): %w", errdefs.ErrUnavailable)
	}
	return f.Transport.Reattach(ctx, rec)
}

// TestAKernelOutOfReachIsNotAKernelGone: a Background session whose kernel to resume is
// out of reach answers at once, keeps trying (cells fail unavailable meanwhile, and no
// fresh kernel takes the namespace's place), and resumes it once it is reached. Past
// ResumeFor the record is given up without touching the kernel, and a fresh kernel runs.
func TestAKernelOutOfReachIsNotAKernelGone(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	dir := t.TempDir()
	first := startSession(t, controller.Options{Transport: local.New(local.Options{RunDir: run}), Dir: dir})
	execute(t, first, "x = 5")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec, ok, err := first.Detach(ctx)
	if err != nil || !ok {
		t.Fatalf("detach: %v %v", ok, err)
	}

	f := &flaky{Transport: local.New(local.Options{RunDir: run}), fails: 2}
	second := startSession(t, controller.Options{Transport: f, Dir: dir, IDBase: 1 << 20, Resume: &rec, Background: true})
	if _, err := second.Execute(ctx, "x", &captureSink{}); !errdefs.IsUnavailable(err) {
		t.Fatalf("a cell while the kernel is out of reach: %v, want unavailable", err)
	}
	var res *controller.CellResult
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if res, err = second.Execute(ctx, "x", &captureSink{}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the kernel was never resumed: %v", err)
		}
	}
	if res.Result == nil || *res.Result != "5" || !second.Origin().Resumed {
		t.Fatalf("x after the resume: %+v, origin %+v", res, second.Origin())
	}
	rec, ok, err = second.Detach(ctx)
	if err != nil || !ok {
		t.Fatalf("detach: %v %v", ok, err)
	}

	never := &flaky{Transport: local.New(local.Options{RunDir: run}), fails: 1 << 30}
	third := startSession(t, controller.Options{Transport: never, Dir: dir, IDBase: 2 << 20, Resume: &rec, Background: true, ResumeFor: time.Millisecond})
	time.Sleep(10 * time.Millisecond)
	res, _ = execute(t, third, "'x' in dir()")
	if res.Result == nil || *res.Result != "False" || !errdefs.IsNotFound(third.Origin().Lost) {
		t.Fatalf("past ResumeFor: %+v, origin %+v; want a fresh kernel and the record given up", res, third.Origin())
	}
	// The kernel given up was not touched: it still runs, and is ended here.
	k, err := local.New(local.Options{RunDir: run}).Reattach(ctx, rec)
	if err != nil {
		t.Fatalf("the kernel given up should still run: %v", err)
	}
	if err := k.Kill(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestAStaleKernelIsReplacedAtItsNextIdleMomentWithItsNamespace: a kernel of another
// build's bundle, resumed, keeps serving but is stale; the next cell first replaces it
// with a kernel of this controller's bundle, its picklable values carried over (a module
// too), an unpicklable one left, and the cell's result names both. A fresh kernel that
// boots stale is refused, not replaced again.
func TestAStaleKernelIsReplacedAtItsNextIdleMomentWithItsNamespace(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	dir := t.TempDir()
	stub, err := images.Stub()
	if err != nil {
		t.Fatal(err)
	}
	older, err := images.Salted(stub, "an older build")
	if err != nil {
		t.Fatal(err)
	}
	first, err := controller.Start(context.Background(), controller.Options{
		Transport: local.New(local.Options{RunDir: run, Bundle: older, CacheDir: t.TempDir()}), Dir: dir, Bundle: older.Hash(),
	})
	if err != nil {
		t.Fatal(err)
	}
	execute(t, first, "import json\nkept = {'a': [1, 2]}\nunpicklable = (lambda: 1)\ndef f(): pass")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec, ok, err := first.Detach(ctx)
	if err != nil || !ok {
		t.Fatalf("detach: %v %v", ok, err)
	}
	second := startSession(t, controller.Options{Transport: local.New(local.Options{RunDir: run}), Dir: dir, IDBase: 1 << 20, Resume: &rec})
	if !second.Origin().Resumed || !second.Stale() {
		t.Fatalf("origin %+v, stale %v: want the older kernel resumed and stale", second.Origin(), second.Stale())
	}
	res, _ := execute(t, second, "(json.dumps(kept), 'unpicklable' in dir())")
	if res.Result == nil || *res.Result != `('{"a": [1, 2]}', False)` {
		t.Fatalf("after the upgrade: %+v", res)
	}
	n := res.Upgrade
	if n == nil || n.From != older.Hash() || n.To != stub.Hash() || !slices.Contains(n.Carried, "json") || !slices.Contains(n.Carried, "kept") || !slices.Contains(n.Left, "unpicklable") || !slices.Contains(n.Left, "f") {
		t.Fatalf("the upgrade notice %+v: want json and kept carried, unpicklable and f (a cell's function) left, %.8s to %.8s", n, older.Hash(), stub.Hash())
	}
	if second.Stale() {
		t.Fatal("still stale after the upgrade")
	}
	if _, err := os.Stat(rec.RunDir); !waitGoneDir(rec.RunDir) {
		t.Fatalf("the replaced kernel's run directory is still there: %v", err)
	}
	res, _ = execute(t, second, "1")
	if res.Upgrade != nil {
		t.Fatalf("a second notice: %+v", res.Upgrade)
	}
}

func waitGoneDir(dir string) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return true
		}
	}
	return false
}

// TestAReplacementThatBootsStaleIsRefusedAndTheOldKernelServesOn: when the kernels this
// controller starts are themselves of another bundle, the upgrade fails with ErrStale
// inside ErrUpgradeFailed, the resumed kernel keeps its namespace and serves, and the
// idle-moment upgrade is not tried again.
func TestAReplacementThatBootsStaleIsRefusedAndTheOldKernelServesOn(t *testing.T) {
	run := filepath.Join(t.TempDir(), "run")
	dir := t.TempDir()
	stub, _ := images.Stub()
	older, err := images.Salted(stub, "an older build")
	if err != nil {
		t.Fatal(err)
	}
	tr := local.New(local.Options{RunDir: run, Bundle: older, CacheDir: t.TempDir()})
	first, err := controller.Start(context.Background(), controller.Options{Transport: tr, Dir: dir, Bundle: older.Hash()})
	if err != nil {
		t.Fatal(err)
	}
	execute(t, first, "kept = 7")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec, _, err := first.Detach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second := startSession(t, controller.Options{Transport: tr, Dir: dir, IDBase: 1 << 20, Resume: &rec})
	res, _ := execute(t, second, "kept")
	if res.Result == nil || *res.Result != "7" || res.Upgrade != nil || !second.Stale() {
		t.Fatalf("a failed idle upgrade: %+v (stale %v); want the old kernel serving, still stale", res, second.Stale())
	}
	if _, err := second.Upgrade(ctx); !errors.Is(err, controller.ErrUpgradeFailed) || !errors.Is(err, controller.ErrStale) {
		t.Fatalf("a forced upgrade to a kernel that boots stale: %v", err)
	}
	if res, _ = execute(t, second, "kept + 1"); res.Result == nil || *res.Result != "8" {
		t.Fatalf("the old kernel after the refused upgrade: %+v", res)
	}
}
