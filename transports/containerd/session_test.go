package containerd_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/fshost"
	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/transports"
	ctrd "github.com/kennel-dev/kennel/transports/containerd"
	"github.com/kennel-dev/kennel/transports/containerd/containerdtest"
)

// lockedSession is a controller session on a containerd transport, with its path map.
type lockedSession struct {
	s   *controller.Session
	end func()
	mu  sync.Mutex
	ke  []error // OnKernelEnd causes
}

// startSession starts a controller session whose kernel runs in a containerd task with mounts
// and the working directory at sandbox path dir.
func startSession(t *testing.T, o ctrd.Options, dir string) *lockedSession {
	t.Helper()
	d := containerdtest.Daemon(t)
	hostDir := t.TempDir()
	if h, ok := hostOf(o.Mounts, dir); ok {
		hostDir = h
	}
	if len(o.Mounts) == 0 {
		hostDir = t.TempDir()
	}
	m, err := pathmap.New(pathmap.Config{Dir: hostDir, Mounts: o.Mounts})
	if err != nil {
		t.Fatal(err)
	}
	b, err := images.Stub()
	if err != nil {
		t.Fatal(err)
	}
	ls := &lockedSession{}
	tr := newTransport(t, d.Client, o)
	ctx := context.Background()
	s, err := controller.Start(ctx, controller.Options{
		Transport:  tr,
		Dir:        hostDir,
		SandboxDir: dir,
		Bundle:     b.Hash(),
		Handler:    fshost.New(m, fshost.Options{}),
		StateDir:   privateDir(t),
		OnKernelEnd: func(_ transports.Info, cause error) {
			ls.mu.Lock()
			ls.ke = append(ls.ke, cause)
			ls.mu.Unlock()
		},
	})
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	ls.s = s
	ls.end = func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.Close(cctx)
		m.Close()
	}
	t.Cleanup(ls.end)
	return ls
}

func hostOf(ms []pathmap.Mount, dir string) (string, bool) {
	for _, m := range ms {
		if m.Sandbox == dir {
			return m.Host, true
		}
	}
	return "", false
}

// run executes a cell and returns its stdout, failing the test when the cell errs.
func (ls *lockedSession) run(t *testing.T, code string) string {
	t.Helper()
	out, res, err := ls.exec(code)
	if err != nil {
		t.Fatalf("cell %q: %v", code, err)
	}
	if res.Status != "ok" {
		t.Fatalf("cell %q: status %s: %+v", code, res.Status, res.Error)
	}
	return out
}

func (ls *lockedSession) exec(code string) (string, *controller.CellResult, error) {
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := ls.s.Execute(ctx, code, controller.WriterSink{Stdout: &out, Stderr: &errb})
	return out.String(), res, err
}

// TestMountsAndOwnership: a mounted file is read through the path map (kennel.fs.read);
// a file the cell writes into a bind mount is owned on the host by the uid the kernel
// runs as, which by default is the operator's (here: root operators get the owner of the
// workspace, so the workspace is chowned to a stand-in operator uid); a write below a
// read-only mount is refused by the path map (read_only) and by the container's own file
// system (EROFS).
func TestMountsAndOwnership(t *testing.T) { eachRuntime(t, testMountsAndOwnership) }

func testMountsAndOwnership(t *testing.T, runtime string) {
	work, data := t.TempDir(), t.TempDir()
	const uid, gid = 4321, 4322
	if os.Getuid() == 0 {
		if err := os.Chown(work, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(data, "input.txt"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ls := startSession(t, ctrd.Options{Runtime: runtime, Mounts: []pathmap.Mount{
		{Sandbox: "/work", Host: work},
		{Sandbox: "/data", Host: data, ReadOnly: true},
	}}, "/work")

	if got := ls.run(t, "import kennel\nprint(kennel.fs.read('/data/input.txt'))"); !strings.Contains(got, "from the host") {
		t.Fatalf("fs.read of a mounted file: %q", got)
	}
	ls.run(t, "open('/work/out.txt', 'w').write('kernel wrote this')")
	fi, err := os.Stat(filepath.Join(work, "out.txt"))
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	wantUID := os.Getuid()
	if wantUID == 0 {
		wantUID = uid
	}
	if int(st.Uid) != wantUID {
		t.Errorf("file written in the bind mount is owned by uid %d, want %d", st.Uid, wantUID)
	}
	out := ls.run(t, `import errno
try:
    open('/data/new.txt', 'w')
    print('written')
except OSError as e:
    print('refused', errno.errorcode[e.errno])`)
	// gVisor checks permission before the mount's flag: a non-root kernel is refused
	// with EACCES there.
	if !strings.Contains(out, "refused EROFS") && (runtime != GVisor || !strings.Contains(out, "refused EACCES")) {
		t.Errorf("write to a read-only bind mount in the kernel: %q, want EROFS", out)
	}
	out = ls.run(t, `import kennel
try:
    kennel.fs.write('/data/new.txt', 'x')
    print('written')
except kennel.HostError as e:
    print('refused', e.code)`)
	if !strings.Contains(out, "refused read_only") {
		t.Errorf("fs.write below a read-only mount: %q, want read_only", out)
	}
	if _, err := os.Stat(filepath.Join(data, "new.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the read-only mount changed: %v", err)
	}
}

// TestLockdown: each default shown by a cell that tries.
func TestLockdown(t *testing.T) { eachRuntime(t, testLockdown) }

func testLockdown(t *testing.T, runtime string) {
	ls := startSession(t, ctrd.Options{Runtime: runtime}, "/tmp")
	cases := []struct{ name, code, want string }{
		{"no network", `import socket
s = socket.socket()
s.settimeout(3)
try:
    s.connect(('1.1.1.1', 80))
    print('connected')
except OSError as e:
    print('refused', type(e).__name__)`, "refused"},
		{"read-only /usr", `try:
    open('/usr/kennel-test', 'w')
    print('written')
except OSError as e:
    print('refused', e.errno)`, "refused 30"},
		{"non-root, no capabilities", `import os
caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapPrm', 'CapBnd'))]
print(os.getuid(), os.getgid(), caps)`, "['0000000000000000', '0000000000000000', '0000000000000000']"},
		{"no new privileges", `print([l.split()[1] for l in open('/proc/self/status') if l.startswith('NoNewPrivs')])`, "['1']"},
		{"tmpfs /tmp is writable", `open('/tmp/x', 'w').write('ok'); print(open('/tmp/x').read())`, "ok"},
		{"own pid namespace", `import os
print(os.getpid())`, "1"},
		{"no interface but loopback", `import socket
print(sorted({n for _, n in socket.if_nameindex()} - {'lo'}))`, "[]"},
		{"masked (or absent, as under gVisor) /proc/timer_list and /sys/firmware", `import os
try:
    n = len(open('/proc/timer_list').read())
except FileNotFoundError:
    n = 0
print(n, os.listdir('/sys/firmware') if os.path.exists('/sys/firmware') else [])`, "0 []"},
		{"read-only /proc/sys", `try:
    open('/proc/sys/kernel/domainname', 'w').write('x')
    print('written')
except OSError as e:
    print('refused', e.errno)`, "refused 30"},
		{"seccomp filter", `print([l.split()[1] for l in open('/proc/self/status') if l.startswith('Seccomp:')])`, "['2']"},
	}
	for _, c := range cases {
		out := ls.run(t, c.code)
		if runtime == GVisor && c.want == "refused 30" && strings.Contains(out, "refused 13") {
			continue // gVisor checks permission first: EACCES for a non-root kernel
		}
		if runtime == GVisor && c.name == "seccomp filter" {
			// runsc applies the spec's profile only with --oci-seccomp; the Sentry's own
			// seccomp filter on the host is the boundary.
			continue
		}
		if !strings.Contains(out, c.want) {
			t.Errorf("%s: %q, want %q", c.name, out, c.want)
		}
	}
	if out := ls.run(t, "import os\nprint(os.getuid())"); strings.TrimSpace(out) == "0" {
		t.Errorf("the kernel runs as root")
	}
}

// TestOOM: a cell that allocates past the memory limit ends its session with the typed
// OOM error (controller.ErrOOM), not a generic exit.
func TestOOM(t *testing.T) { eachRuntime(t, testOOM) }

func testOOM(t *testing.T, runtime string) {
	ls := startSession(t, ctrd.Options{Runtime: runtime, Memory: 96 << 20}, "/tmp")
	ls.run(t, "x = 1")
	_, res, err := ls.exec("blocks = []\nwhile True:\n    blocks.append(bytearray(16 << 20))")
	if !errors.Is(err, controller.ErrOOM) {
		t.Fatalf("a cell past the memory limit: %+v, %v; want controller.ErrOOM", res, err)
	}
}

// TestForkBomb: a fork bomb is stopped by the pids limit (fork fails with EAGAIN) and the
// controller keeps serving another session on the same engine meanwhile.
func TestForkBomb(t *testing.T) { eachRuntime(t, testForkBomb) }

func testForkBomb(t *testing.T, runtime string) {
	bomb := startSession(t, ctrd.Options{Runtime: runtime, Pids: 64}, "/tmp")
	other := startSession(t, ctrd.Options{Runtime: runtime}, "/tmp")
	other.run(t, "y = 1")
	bombCell := `import os, errno, time
pids, err = [], None
try:
    while len(pids) < 10000:
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        pids.append(pid)
except OSError as e:
    err = errno.errorcode[e.errno]
for p in pids:
    os.kill(p, 9)
for p in pids:
    os.waitpid(p, 0)
print(len(pids), err)`
	if runtime == GVisor {
		// Under gVisor the pids limit bounds the sandbox's host threads (the Sentry's),
		// not the kernel's own processes: the bomb may end the sandbox, its kernel with
		// it, and nothing else.
		out, res, err := bomb.exec(bombCell)
		if err == nil && (res.Status != "ok" || !strings.Contains(out, "EAGAIN")) {
			t.Fatalf("fork bomb under gVisor: %q %+v, want EAGAIN or the kernel ended", out, res)
		}
		t.Logf("fork bomb under gVisor: %q, %v", out, err)
		if got := other.run(t, "print(y + 1)"); strings.TrimSpace(got) != "2" {
			t.Errorf("the other session after the fork bomb: %q", got)
		}
		return
	}
	out := bomb.run(t, bombCell)
	f := strings.Fields(out)
	if len(f) != 2 || f[1] != "EAGAIN" {
		t.Fatalf("fork bomb: %q, want it stopped with EAGAIN", out)
	}
	if got := other.run(t, "print(y + 1)"); strings.TrimSpace(got) != "2" {
		t.Errorf("the other session after the fork bomb: %q", got)
	}
	if got := bomb.run(t, "print('still here')"); !strings.Contains(got, "still here") {
		t.Errorf("the bombed session after the bomb: %q", got)
	}
}

func privateDir(t *testing.T) string {
	d := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

// GVisor is the runtime the lock-down tests also run under: gVisor's runsc as the runc
// shim's OCI runtime binary (ctrd.Options.Runtime).
const GVisor = "runsc"

// eachRuntime runs test under runc (the default runtime, "") and under gVisor (GVisor, on
// the daemon's PATH: it fails under CI=true without it and skips elsewhere).
func eachRuntime(t *testing.T, test func(t *testing.T, runtime string)) {
	t.Run("runc", func(t *testing.T) { test(t, "") })
	t.Run("gvisor", func(t *testing.T) {
		testneed.Tools(t, GVisor)
		test(t, GVisor)
	})
}
