package kubernetes_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/fshost"
	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/transports"
	kube "github.com/kennel-dev/kennel/transports/kubernetes"
	"github.com/kennel-dev/kennel/transports/kubernetes/kubetest"
)

// lockedSession is a controller session on a Kubernetes transport, with its path map.
type lockedSession struct {
	s  *controller.Session
	tr *kube.Transport
}

// startSession starts a controller session whose kernel runs in a pod of tr's, working at
// sandbox path dir, its host directory hostDir (a fresh one when "").
func startSession(t *testing.T, tr *kube.Transport, o kube.Options, dir string) *lockedSession {
	t.Helper()
	hostDir := t.TempDir()
	for _, m := range o.Mounts {
		if m.Sandbox == dir {
			hostDir = m.Host
		}
	}
	m, err := pathmap.New(pathmap.Config{Dir: hostDir, Mounts: o.PathMounts()})
	if err != nil {
		t.Fatal(err)
	}
	b, err := images.Stub()
	if err != nil {
		t.Fatal(err)
	}
	var handler controller.HostHandler = fshost.New(m, fshost.Options{})
	if err := o.HostFiles(); err != nil {
		handler = kube.Unserved{Reason: err}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := controller.Start(ctx, controller.Options{
		Transport:  tr,
		Dir:        hostDir,
		SandboxDir: dir,
		Bundle:     b.Hash(),
		Handler:    handler,
		StateDir:   privateDir(t),
	})
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_ = s.Close(cctx)
		m.Close()
	})
	return &lockedSession{s: s, tr: tr}
}

// session is startSession on a transport of its own made from o.
func session(t *testing.T, o kube.Options, dir string) *lockedSession {
	t.Helper()
	return startSession(t, newTransport(t, o), o, dir)
}

func privateDir(t *testing.T) string {
	d := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
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
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := ls.s.Execute(ctx, code, controller.WriterSink{Stdout: &out, Stderr: &errb})
	return out.String(), res, err
}

// onlyPod is the one kennel pod in the namespace (the session's).
func onlyPod(t *testing.T, c *kubetest.C) corev1.Pod {
	t.Helper()
	ps, err := c.Client.CoreV1().Pods(c.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: kube.LabelKennel + "=1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps.Items) != 1 {
		t.Fatalf("%d kennel pods, want the session's one", len(ps.Items))
	}
	return ps.Items[0]
}

// TestLockdown: each default of the pod shown by a cell that tries, and in the pod's spec
// and its NetworkPolicy as the API server holds them.
func TestLockdown(t *testing.T) {
	c := kubetest.Cluster(t)
	waitNoLeftovers(t, c)
	ls := session(t, kube.Options{}, "/tmp")
	cases := []struct{ name, code, want string }{
		{"read-only root", `try:
    open('/usr/kennel-test', 'w')
    print('written')
except OSError as e:
    print('refused', e.errno)`, "refused 30"},
		{"non-root, no capabilities", `import os
caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapPrm', 'CapBnd', 'CapAmb', 'CapInh'))]
print(os.getuid() != 0, os.getgid() != 0, set(os.getgroups()) <= {os.getgid()}, caps)`, "True True True ['0000000000000000', '0000000000000000', '0000000000000000', '0000000000000000', '0000000000000000']"},
		{"no new privileges", `print([l.split()[1] for l in open('/proc/self/status') if l.startswith('NoNewPrivs')])`, "['1']"},
		{"seccomp filter", `print([l.split()[1] for l in open('/proc/self/status') if l.startswith('Seccomp:')])`, "['2']"},
		{"memory-backed /tmp is writable", `import os
open('/tmp/x', 'w').write('ok')
print(open('/tmp/x').read(), [l.split()[2] for l in open('/proc/self/mounts') if l.split()[1] == '/tmp'])`, "ok ['tmpfs']"},
		{"no service account token", `import os
print(os.path.exists('/var/run/secrets/kubernetes.io/serviceaccount'))`, "False"},
		{"no service links", `import os
print(sorted(k for k in os.environ if k.endswith('_SERVICE_HOST') and k != 'KUBERNETES_SERVICE_HOST'))`, "[]"},
		{"own pid namespace: the pod's init is pid 1", `print(open('/proc/1/cmdline').read().split('\0')[0])`, "python3"},
		{"memory limit 1 GiB", `v = None
for p in ('/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory/memory.limit_in_bytes'):
    try:
        v = open(p).read().strip()
        break
    except OSError:
        pass
print(v)`, "1073741824"},
	}
	for _, cs := range cases {
		if out := ls.run(t, cs.code); !strings.Contains(out, cs.want) {
			t.Errorf("%s: %q, want %q", cs.name, out, cs.want)
		}
	}

	p := onlyPod(t, c)
	sc, cs := p.Spec.SecurityContext, p.Spec.Containers[0].SecurityContext
	switch {
	case p.Spec.HostNetwork || p.Spec.HostPID || p.Spec.HostIPC:
		t.Errorf("pod shares a host namespace")
	case p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken:
		t.Errorf("service-account token mounted")
	case p.Spec.EnableServiceLinks == nil || *p.Spec.EnableServiceLinks:
		t.Errorf("service links enabled")
	case p.Spec.RestartPolicy != corev1.RestartPolicyNever:
		t.Errorf("restart policy %s", p.Spec.RestartPolicy)
	case sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 || sc.RunAsGroup == nil:
		t.Errorf("pod security context %+v: want runAsNonRoot with a numeric uid and gid", sc)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("seccomp %+v", sc.SeccompProfile)
	case cs == nil || cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem || cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation ||
		cs.Capabilities == nil || len(cs.Capabilities.Drop) != 1 || cs.Capabilities.Drop[0] != "ALL" || len(cs.Capabilities.Add) != 0:
		t.Errorf("container security context %+v", cs)
	case p.Status.QOSClass != corev1.PodQOSGuaranteed:
		t.Errorf("QoS class %s, want Guaranteed (requests = limits)", p.Status.QOSClass)
	}
	res := p.Spec.Containers[0].Resources
	if res.Limits.Memory().Value() != kube.DefaultMemory || res.Limits.Cpu().MilliValue() != kube.DefaultMilliCPU {
		t.Errorf("limits %v, want 1Gi and 1 CPU", res.Limits)
	}
	np, err := c.Client.NetworkingV1().NetworkPolicies(c.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the pod's NetworkPolicy: %v", err)
	}
	if np.Spec.PodSelector.MatchLabels[kube.LabelPod] != p.Name || len(np.Spec.Ingress) != 0 || len(np.Spec.Egress) != 0 || len(np.Spec.PolicyTypes) != 2 {
		t.Errorf("NetworkPolicy %+v: want one that selects the pod and allows it nothing", np.Spec)
	}
}

// TestNetwork: a kernel reaches nothing beyond its pod on the test cluster's bridge: no
// address outside, not the host's own addresses (eth0, the API server's port on them),
// not the host's loopback (the pod's 127.0.0.1 is its own). The bridge does not enforce
// the NetworkPolicy, so what the kernel can still reach is the bridge's subnet (other
// pods): logged, not asserted.
func TestNetwork(t *testing.T) {
	c := kubetest.Cluster(t)
	u, err := url.Parse(c.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	apiPort := u.Port()
	ls := session(t, kube.Options{}, "/tmp")
	probe := `import socket
def reach(host, port):
    s = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET)
    s.settimeout(3)
    try:
        s.connect((host, int(port)))
        return 'connected'
    except OSError as e:
        return 'refused %s' % (e.errno,)
    finally:
        s.close()
`
	ls.run(t, probe)
	targets := [][2]string{{"1.1.1.1", "80"}, {"8.8.8.8", "53"}, {"127.0.0.1", apiPort}}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.To4() == nil {
			continue
		}
		targets = append(targets, [2]string{ipn.IP.String(), apiPort}, [2]string{ipn.IP.String(), "22"})
	}
	for _, tg := range targets {
		out := strings.TrimSpace(ls.run(t, fmt.Sprintf("print(reach(%q, %q))", tg[0], tg[1])))
		if strings.HasPrefix(out, "connected") {
			t.Errorf("the kernel reached %s:%s", tg[0], tg[1])
		}
		t.Logf("%s:%s: %s", tg[0], tg[1], out)
	}
	if out := ls.run(t, `print(sorted(n for _, n in socket.if_nameindex()))`); !strings.Contains(out, "lo") {
		t.Errorf("interfaces %q", out)
	} else {
		t.Logf("interfaces: %s", strings.TrimSpace(out))
	}
	t.Logf("routes: %s", strings.TrimSpace(ls.run(t, `print(open('/proc/net/route').read())`)))
}

// TestOOM: a cell that allocates past the memory limit ends its session with the typed
// OOM error (controller.ErrOOM), not a generic exit.
func TestOOM(t *testing.T) {
	ls := session(t, kube.Options{Memory: 128 << 20, TmpSize: 16 << 20}, "/tmp")
	ls.run(t, "x = 1")
	_, res, err := ls.exec("blocks = []\nwhile True:\n    blocks.append(bytearray(16 << 20))")
	if !errors.Is(err, controller.ErrOOM) {
		t.Fatalf("a cell past the memory limit: %+v, %v; want controller.ErrOOM", res, err)
	}
}

// TestForkBomb: a fork bomb (each child a sleep, so memory does not end it first) is
// stopped by the node's pid limit (the test cluster's kubelet sets podPidsLimit 1024: fork
// fails with EAGAIN), and the controller keeps serving another session meanwhile.
func TestForkBomb(t *testing.T) {
	o := kube.Options{MilliCPU: 200}
	tr := newTransport(t, o)
	bomb := startSession(t, tr, o, "/tmp")
	other := startSession(t, tr, o, "/tmp")
	other.run(t, "y = 1")
	out := bomb.run(t, `import os, errno, time
pids, err = [], None
try:
    while len(pids) < 5000:
        pid = os.fork()
        if pid == 0:
            try:
                os.execv('/bin/sleep', ['sleep', '30'])
            finally:
                os._exit(1)
        pids.append(pid)
except OSError as e:
    err = errno.errorcode[e.errno]
for p in pids:
    os.kill(p, 9)
for p in pids:
    os.waitpid(p, 0)
print(len(pids), err)`)
	f := strings.Fields(out)
	if len(f) != 2 || f[1] != "EAGAIN" {
		t.Fatalf("fork bomb: %q, want it stopped with EAGAIN", out)
	}
	t.Logf("fork bomb stopped after %s forks", f[0])
	if got := other.run(t, "print(y + 1)"); strings.TrimSpace(got) != "2" {
		t.Errorf("the other session after the fork bomb: %q", got)
	}
	if got := bomb.run(t, "print('still here')"); !strings.Contains(got, "still here") {
		t.Errorf("the bombed session after the bomb: %q", got)
	}
}

// TestMountsAndFiles: the path map's mounts are hostPath volumes on the node (the test's
// own machine): a mounted file is read through the path map (kennel.fs.read), a file the
// kernel writes is owned on the host by the kernel's uid, a write below a read-only mount
// is refused by the path map (read_only) and by the volume (EROFS). A claim the controller
// has not mounted is answered unavailable, naming it.
func TestMountsAndFiles(t *testing.T) {
	c := kubetest.Cluster(t)
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
	o := kube.Options{Node: c.Node, Mounts: []pathmap.Mount{
		{Sandbox: "/work", Host: work},
		{Sandbox: "/data", Host: data, ReadOnly: true},
	}}
	ls := session(t, o, "/work")
	if got := ls.run(t, "import kennel, os\nprint(kennel.fs.read('/data/input.txt'), os.getcwd())"); !strings.Contains(got, "from the host") || !strings.Contains(got, "/work") {
		t.Fatalf("fs.read of a mounted file, cwd: %q", got)
	}
	ls.run(t, "open('/work/out.txt', 'w').write('kernel wrote this')")
	fi, err := os.Stat(filepath.Join(work, "out.txt"))
	if err != nil {
		t.Fatal(err)
	}
	wantUID := os.Getuid()
	if wantUID == 0 {
		wantUID = uid
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != wantUID {
		t.Errorf("file written in the hostPath volume is owned by uid %d, want %d", st.Uid, wantUID)
	}
	if out := ls.run(t, `import errno
try:
    open('/data/new.txt', 'w')
    print('written')
except OSError as e:
    print('refused', errno.errorcode[e.errno])`); !strings.Contains(out, "refused EROFS") {
		t.Errorf("write to a read-only volume in the kernel: %q, want EROFS", out)
	}
	if out := ls.run(t, `import kennel
try:
    kennel.fs.write('/data/new.txt', 'x')
    print('written')
except kennel.HostError as e:
    print('refused', e.code)`); !strings.Contains(out, "refused read_only") {
		t.Errorf("fs.write below a read-only mount: %q, want read_only", out)
	}

	// A claim the controller has not mounted: fs.* answered unavailable, naming it.
	u := kube.Unserved{Reason: kube.Options{Claims: []kube.Claim{{Name: "shared", Sandbox: "/shared"}}}.HostFiles()}
	if !u.Serves("fs.read") || u.Serves("echo") {
		t.Fatalf("Unserved serves the wrong kinds")
	}
	_, err = u.Serve(context.Background(), "fs.read", nil)
	var coded interface{ Code() string }
	if !errors.As(err, &coded) || coded.Code() != "unavailable" || !strings.Contains(err.Error(), "shared at /shared") || !errors.Is(err, transports.ErrUnavailable) {
		t.Errorf("fs.read below an unmounted claim: %v, want unavailable naming the claim", err)
	}
}

// TestConcurrentSessions: 20 sessions on one transport, each a controller session running
// cells at the same time, their pods sharing one node (small requests: the node has two
// CPUs).
func TestConcurrentSessions(t *testing.T) {
	c := kubetest.Cluster(t)
	waitNoLeftovers(t, c)
	o := kube.Options{MilliCPU: 50, Memory: 192 << 20, TmpSize: 16 << 20}
	tr := newTransport(t, o)
	const n = 20
	sessions := make([]*lockedSession, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	t0 := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					errs <- fmt.Errorf("session %d: %v", i, r)
				}
			}()
			sessions[i] = startSessionErr(t, tr, o, errs)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d sessions started in %v", n, time.Since(t0))
	t1 := time.Now()
	out := make(chan error, n)
	for i, ls := range sessions {
		go func() {
			for j := range 10 {
				got, res, err := ls.exec(fmt.Sprintf("print(%d * 1000 + %d)", i, j))
				if err == nil && (res.Status != "ok" || strings.TrimSpace(got) != fmt.Sprint(i*1000+j)) {
					err = fmt.Errorf("cell %d of session %d: %q, %+v", j, i, got, res)
				}
				if err != nil {
					out <- err
					return
				}
			}
			out <- nil
		}()
	}
	for range n {
		if err := <-out; err != nil {
			t.Error(err)
		}
	}
	t.Logf("%d cells in %v", n*10, time.Since(t1))
	if ps := kennelPods(t, c); len(ps) != n {
		t.Errorf("%d pods, want %d", len(ps), n)
	}
}

// startSessionErr is startSession for a goroutine: a failure is sent on errs, nil
// returned.
func startSessionErr(t *testing.T, tr *kube.Transport, o kube.Options, errs chan<- error) *lockedSession {
	hostDir := t.TempDir()
	m, err := pathmap.New(pathmap.Config{Dir: hostDir, Mounts: o.PathMounts()})
	if err != nil {
		errs <- err
		return nil
	}
	b, err := images.Stub()
	if err != nil {
		errs <- err
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := controller.Start(ctx, controller.Options{
		Transport: tr, Dir: hostDir, SandboxDir: "/tmp", Bundle: b.Hash(),
		Handler: fshost.New(m, fshost.Options{}), StateDir: privateDir(t),
	})
	if err != nil {
		m.Close()
		errs <- err
		return nil
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_ = s.Close(cctx)
		m.Close()
	})
	return &lockedSession{s: s, tr: tr}
}
