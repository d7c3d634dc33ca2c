package docker

import (
	"testing"

	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports"
)

// TestTheFIFODirectoryIsMountedOnlyWhereTheKernelSharesTheHostsKernel: the session's
// FIFO directory is bind-mounted read-only, at ContainerFIFODir, for an engine on a unix
// socket and a runtime on the host's kernel; never for a remote engine, gVisor or another
// runtime, a relative directory or none.
func TestTheFIFODirectoryIsMountedOnlyWhereTheKernelSharesTheHostsKernel(t *testing.T) {
	b, err := images.Stub()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host, runtime, dir string
		want               bool
	}{
		{"unix:///var/run/docker.sock", "", "/state/output/session-s/fifo", true},
		{"unix:///var/run/docker.sock", "runc", "/d", true},
		{"unix:///var/run/docker.sock", "crun", "/d", true},
		{"unix:///var/run/docker.sock", "runsc", "/d", false},
		{"unix:///var/run/docker.sock", "kata-runtime", "/d", false},
		{"tcp://10.0.0.2:2375", "", "/d", false},
		{"ssh://me@box", "", "/d", false},
		{"unix:///var/run/docker.sock", "", "", false},
		{"unix:///var/run/docker.sock", "", "relative", false},
		{"unix:///var/run/docker.sock", "", "/a,b", false},
	} {
		cli, err := client.New(client.WithHost(tc.host))
		if err != nil {
			t.Fatal(err)
		}
		tr, err := New(cli, Options{Runtime: tc.runtime})
		if err != nil {
			t.Fatal(err)
		}
		spec := transports.Spec{SessionID: "s", Dir: "/tmp", FIFODir: tc.dir}
		m, ok := tr.fifoMount(spec)
		if ok != tc.want {
			t.Errorf("%s, runtime %q, dir %q: mounted %v, want %v", tc.host, tc.runtime, tc.dir, ok, tc.want)
		}
		hc := tr.createOptions("img", b, spec).HostConfig
		if got := fifoDirOf(hc); (got == ContainerFIFODir) != tc.want {
			t.Errorf("%s, runtime %q, dir %q: container's FIFO dir %q", tc.host, tc.runtime, tc.dir, got)
		}
		if ok && (m.Source != tc.dir || m.Target != ContainerFIFODir || !m.ReadOnly) {
			t.Errorf("mount %+v, want %s read-only at %s", m, tc.dir, ContainerFIFODir)
		}
		cli.Close()
	}
}
