package launch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/sessionspec"
	"github.com/kennel-dev/kennel/transports/containerd/containerdtest"
)

// TestContainerdSessionsShareOneClientPerDaemon: two containerd sessions on the same
// daemon are assembled over one client of the Kit's; an image the daemon does not hold
// fails the assembly at once, naming `kennel image build --containerd` and the daemon's
// --address, and holds nothing.
func TestContainerdSessionsShareOneClientPerDaemon(t *testing.T) {
	d := containerdtest.Own(t)
	kit := New(Options{})
	t.Cleanup(func() { _ = kit.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 2 {
		p, err := kit.Assemble(ctx, &sessionspec.Transport{Containerd: &sessionspec.Containerd{Address: d.Address}}, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if p.Kind != sessionspec.KindContainerd || p.Transport.Name() != "containerd" {
			t.Fatalf("parts %+v", p)
		}
		p.Release()
	}
	kit.mu.Lock()
	n := len(kit.ctrd)
	kit.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d containerd clients for one daemon, want 1", n)
	}
	p, err := kit.Assemble(ctx, &sessionspec.Transport{Containerd: &sessionspec.Containerd{Address: d.Address, Image: "docker.io/library/kennel-kernel:000000000000"}}, t.TempDir())
	if err == nil || p != nil || !strings.Contains(err.Error(), "kennel image build --containerd") || !strings.Contains(err.Error(), "--address "+d.Address) {
		t.Fatalf("a missing image: %+v, %v; want an error naming the command and its --address", p, err)
	}
}
