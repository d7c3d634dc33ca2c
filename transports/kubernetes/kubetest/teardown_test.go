package kubetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/testneed"
	corev1 "k8s.io/api/core/v1"
)

// TestDownLeavesNothing brings the test binary's cluster down (a later Cluster call starts
// another) after a pod with a memory emptyDir and a hostPath volume ran on the pod network,
// and checks that nothing of it is left on the host: no process, mount, netns, veth,
// iptables chain or rule, kubepods cgroup, bridge or run directory, and the sysctls as
// they were before up. Its file sorts last so that the other tests share one cluster.
func TestDownLeavesNothing(t *testing.T) {
	c := Cluster(t)
	host := t.TempDir()
	if err := os.WriteFile(host+"/f", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	runPod(t, c, func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{
			{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
			{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: host}}},
		}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}, {Name: "host", MountPath: "/host", ReadOnly: true}}
	})
	// The pod is left running: down must delete it.
	mu.Lock()
	if shared == c {
		shared = nil // this test brings it down; Main then has nothing to do
	}
	mu.Unlock()
	t0 := time.Now()
	if err := c.down(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster down in %s", time.Since(t0).Round(100*time.Millisecond))
	t.Log(c.downLog)
	left, err := leftovers(c.before, c.Dir, c.Bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range left {
		t.Errorf("left after down: %s", l)
	}
}

// TestLeftoversSeesWhatIsLeft gives the leftover check things a cluster could leave (a
// process naming its run directory, the directory itself, a changed sysctl) and wants each
// reported, so that TestDownLeavesNothing's pass means something.
func TestLeftoversSeesWhatIsLeft(t *testing.T) {
	testneed.Root(t) // iptables-save reads the tables as root only
	dir := t.TempDir()
	before, err := snapshot()
	if err != nil {
		t.Fatal(err)
	}
	before.sysctls["kernel/panic"] = "-12345" // as if kubelet had changed it
	cmd := exec.Command("sh", "-c", "sleep 60", dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// A pod's netns (containerd names them cni-<uuid>) is the cluster's; another test's
	// (sshtest's partitions, running beside it under go test ./...) is not.
	pod, other := fmt.Sprintf("cni-kubetest-%d", os.Getpid()), fmt.Sprintf("ktsshkubetest%d", os.Getpid())
	for _, ns := range []string{pod, other} {
		if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
		}
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", ns).Run() })
	}
	left, err := leftovers(before, dir, "/nonexistent")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"process " + strconv.Itoa(cmd.Process.Pid) + ": ", "run directory " + dir, "sysctl kernel/panic = ", "netns " + pod, "mount /run/netns/" + pod} {
		if !slices.ContainsFunc(left, func(l string) bool { return strings.HasPrefix(l, want) }) {
			t.Errorf("leftovers %q lack %q", left, want)
		}
	}
	for _, l := range left {
		if strings.Contains(l, other) {
			t.Errorf("leftovers name another test's netns: %q", l)
		}
	}
}
