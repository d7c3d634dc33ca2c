package containerd_test

import (
	"context"
	"os/exec"
	"strconv"
	"testing"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"

	ctrd "github.com/kennel-dev/kennel/transports/containerd"
	"github.com/kennel-dev/kennel/transports/containerd/containerdtest"
	"github.com/kennel-dev/kennel/transports/docker"
)

// TestSweepTakesADetachedKernelsStartCutShort: a detached kernel's container whose task
// never started (its controller SIGKILLed between the container and the task) is no
// kernel that outlives anyone: the owner rule takes it once its controller is gone, and
// keeps it while that controller lives (its start may be under way).
func TestSweepTakesADetachedKernelsStartCutShort(t *testing.T) {
	d := containerdtest.Daemon(t)
	self, err := docker.Self()
	if err != nil {
		t.Fatal(err)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := docker.Controller{Host: self.Host, Boot: self.Boot, PID: gone.Process.Pid, Start: 1}
	labels := func(c docker.Controller, session string) map[string]string {
		return map[string]string{
			ctrd.LabelKennel: "1", ctrd.LabelDetached: "1", ctrd.LabelSession: session,
			docker.LabelController: c.ID(), docker.LabelHost: c.Host, docker.LabelBoot: c.Boot,
			docker.LabelPID: strconv.Itoa(c.PID), docker.LabelStart: strconv.FormatUint(c.Start, 10),
		}
	}
	ctx := namespaces.WithNamespace(context.Background(), ctrd.Namespace)
	for id, l := range map[string]map[string]string{"kennel-cutshort-dead": labels(dead, "s1"), "kennel-cutshort-live": labels(self, "s2")} {
		c, err := d.Client.NewContainer(ctx, id, client.WithContainerLabels(l), client.WithSpec(&oci.Spec{}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.WithoutCancel(ctx)) })
	}
	res, err := ctrd.Sweep(context.Background(), d.Client, ctrd.SweepOptions{Self: self, Keep: func(string) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	removed := map[string]bool{}
	for _, id := range res.Removed {
		removed[id] = true
	}
	if !removed["kennel-cutshort-dead"] || removed["kennel-cutshort-live"] {
		t.Fatalf("swept %v: want the dead controller's task-less detached container, not the live one's", res.Removed)
	}
	if _, err := d.Client.LoadContainer(ctx, "kennel-cutshort-live"); err != nil {
		t.Fatalf("the live controller's container: %v", err)
	}
}
