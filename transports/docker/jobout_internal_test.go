package docker

import (
	"testing"

	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports"
)

// TestTheJobOutputDirectoryIsMountedOnlyWhereTheKernelSharesTheHostsKernel: the session's
// job output directory is bind-mounted (writable: the jobs append to its files), at
// ContainerJobOutDir, for an engine on a unix socket and a runtime on the host's kernel;
// never for a remote engine, gVisor or another runtime, a relative directory or none.
func TestTheJobOutputDirectoryIsMountedOnlyWhereTheKernelSharesTheHostsKernel(t *testing.T) {
	b, err := images.Stub()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host, runtime, dir string
		want               bool
	}{
		{"unix:///var/run/docker.sock", "", "/state/output/session-s/jobout", true},
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
		spec := transports.Spec{SessionID: "s", Dir: "/tmp", JobOutDir: tc.dir}
		m, ok := tr.jobOutMount(spec)
		if ok != tc.want {
			t.Errorf("%s, runtime %q, dir %q: mounted %v, want %v", tc.host, tc.runtime, tc.dir, ok, tc.want)
		}
		hc := tr.createOptions("img", b, spec).HostConfig
		if got := jobOutDirOf(hc); (got == ContainerJobOutDir) != tc.want {
			t.Errorf("%s, runtime %q, dir %q: container's job output dir %q", tc.host, tc.runtime, tc.dir, got)
		}
		if ok && (m.Source != tc.dir || m.Target != ContainerJobOutDir || m.ReadOnly || m.Type != "bind") {
			t.Errorf("mount %+v, want a writable bind of %s at %s", m, tc.dir, ContainerJobOutDir)
		}
		cli.Close()
	}
}
