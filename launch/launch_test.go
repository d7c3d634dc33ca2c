package launch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"pgregory.net/rapid"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/sessionspec"
	"github.com/kennel-dev/kennel/transports/docker"
	"github.com/kennel-dev/kennel/transports/ssh"
	"github.com/kennel-dev/kennel/transports/wrapped"
)

// offlineKit is a Kit whose Docker Engine and ssh hosts cannot be reached (a missing
// socket; every host is 127.0.0.1 port 1), so an assembly of those kinds fails fast.
func offlineKit(t testing.TB) *Kit {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "ssh_config")
	if err := os.WriteFile(cfg, []byte("Host *\n  HostName 127.0.0.1\n  Port 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k := New(Options{
		Engine: docker.ConnectOptions{Client: []client.Opt{client.WithHost("unix://" + filepath.Join(t.TempDir(), "no-engine.sock"))}, PingTimeout: 200 * time.Millisecond},
		Hosts:  ssh.HostsOptions{ConfigFile: cfg, KnownHosts: filepath.Join(t.TempDir(), "known_hosts"), AgentSocket: "none"},
	})
	t.Cleanup(func() { _ = k.Close() })
	return k
}

// genSpec draws any description: any subset of the kinds, any fields, valid or not.
func genSpec(t *rapid.T, dir string) *sessionspec.Transport {
	if rapid.IntRange(0, 9).Draw(t, "absent") == 0 {
		return nil
	}
	str := rapid.SampledFrom([]string{"", "x", "/abs", "rel", "-dash", "python3", "none", "bridge", "host", "2g", "-1", "lots", "1000:1000", "0:0", "me@h:22", dir, "setsid"})
	tr := &sessionspec.Transport{}
	// Mostly one kind (so descriptions that can start are drawn often), else any set.
	one := rapid.SampledFrom([]string{"", "local", "wrapped", "docker", "ssh", "containerd"}).Draw(t, "kind")
	pick := func(kind string) bool { return one == kind || (one == "" && rapid.Bool().Draw(t, kind)) }
	if pick("local") {
		tr.Local = &sessionspec.Local{}
	}
	if pick("wrapped") {
		tr.ArgvPrefix = rapid.SliceOfN(str, 0, 3).Draw(t, "argv")
	}
	if pick("docker") {
		tr.Docker = &sessionspec.Docker{Image: str.Draw(t, "image"), Container: str.Draw(t, "container"), Network: str.Draw(t, "network"),
			Memory: str.Draw(t, "memory"), User: str.Draw(t, "user"), Pids: rapid.Int64Range(-2, 3).Draw(t, "pids")}
	}
	if pick("ssh") {
		tr.SSH = &sessionspec.SSH{Target: str.Draw(t, "target"), Dir: str.Draw(t, "sshdir")}
	}
	if pick("containerd") {
		// Never the machine's daemon: a socket nothing listens on, or a bad address.
		tr.Containerd = &sessionspec.Containerd{Address: rapid.SampledFrom([]string{filepath.Join(dir, "no-containerd.sock"), "rel.sock"}).Draw(t, "address"),
			Network: str.Draw(t, "cnetwork"), Memory: str.Draw(t, "cmemory"), User: str.Draw(t, "cuser"), Runtime: str.Draw(t, "cruntime"),
			Pids: rapid.Int64Range(-2, 3).Draw(t, "cpids")}
	}
	if rapid.Bool().Draw(t, "python") {
		tr.Python = str.Draw(t, "python name")
	}
	if rapid.IntRange(0, 3).Draw(t, "mount") == 0 {
		tr.PathMap = []pathmap.Mount{{Sandbox: str.Draw(t, "sandbox"), Host: rapid.SampledFrom([]string{dir, "/nonexistent", "rel"}).Draw(t, "hostdir")}}
	}
	if rapid.IntRange(0, 3).Draw(t, "env") == 0 {
		tr.Env = []string{rapid.SampledFrom([]string{"HOME", "1X", "PATH"}).Draw(t, "envname")}
	}
	return tr
}

// TestPropNeverAHostKernelUnlessAskedFor: over generated descriptions, an assembly either
// fails (nothing held) or starts exactly the kind the description names; a local (host)
// transport comes only from an absent description or one that says local, and a wrapped
// one always has the description's non-empty wrapper.
func TestPropNeverAHostKernelUnlessAskedFor(t *testing.T) {
	dir := t.TempDir()
	k := offlineKit(t)
	assembled := map[string]int{}
	rapid.Check(t, func(rt *rapid.T) {
		spec := genSpec(rt, dir)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p, err := k.Assemble(ctx, spec, dir)
		if err != nil {
			if p != nil {
				rt.Fatalf("a failed assembly returned parts: %+v", p)
			}
			if spec.Validate() != nil && !errors.Is(err, sessionspec.ErrInvalid) {
				rt.Fatalf("an invalid description's refusal %v is not ErrInvalid", err)
			}
			return
		}
		defer p.Release()
		kind, kerr := spec.Kind()
		if kerr != nil {
			rt.Fatalf("assembled a description that names no kind: %v", kerr)
		}
		if got := p.Transport.Name(); got != kind || p.Kind != kind {
			rt.Fatalf("description of kind %s assembled a %s transport (parts say %s)", kind, got, p.Kind)
		}
		if kind == sessionspec.KindLocal && spec != nil && spec.Local == nil {
			rt.Fatalf("a host kernel for %+v", spec)
		}
		if w, ok := p.Transport.(*wrapped.Transport); ok {
			if argv := w.Options().ArgvPrefix; len(argv) == 0 || !slices.Equal(argv, spec.ArgvPrefix) {
				rt.Fatalf("wrapped transport with argv %q for %q", argv, spec.ArgvPrefix)
			}
		}
		if p.Dir != dir || p.Handler == nil || p.SandboxDir == "" {
			rt.Fatalf("parts %+v", p)
		}
		assembled[kind]++
	})
	// The property is not vacuous: descriptions of both kinds that need no engine or host
	// were assembled.
	t.Logf("assembled: %v", assembled)
	if assembled[sessionspec.KindLocal] == 0 || assembled[sessionspec.KindWrapped] == 0 {
		t.Fatalf("too few descriptions assembled to say anything: %v", assembled)
	}
}

// TestAssembleRefusesWhatItCannotStart: an invalid description is ErrInvalid, a bad
// working directory its controller error, and a kind whose engine or host is out of
// reach says so; none holds anything.
func TestAssembleRefusesWhatItCannotStart(t *testing.T) {
	dir := t.TempDir()
	k := offlineKit(t)
	ctx := context.Background()
	for name, tc := range map[string]struct {
		spec *sessionspec.Transport
		dir  string
		want string
	}{
		"no kind":            {&sessionspec.Transport{}, dir, "names no transport"},
		"two kinds":          {&sessionspec.Transport{Local: &sessionspec.Local{}, Docker: &sessionspec.Docker{}}, dir, "names 2 transports"},
		"empty argv":         {&sessionspec.Transport{ArgvPrefix: []string{}}, dir, "argvPrefix"},
		"missing dir":        {nil, filepath.Join(dir, "gone"), "working directory is gone"},
		"no engine":          {&sessionspec.Transport{Docker: &sessionspec.Docker{}}, dir, "unavailable"},
		"host down":          {&sessionspec.Transport{SSH: &sessionspec.SSH{Target: "somewhere"}}, dir, "ssh somewhere"},
		"mount outside":      {&sessionspec.Transport{ArgvPrefix: []string{"x"}, PathMap: []pathmap.Mount{{Sandbox: "/w", Host: "/nonexistent"}}}, dir, "path map"},
		"docker network":     {&sessionspec.Transport{Docker: &sessionspec.Docker{Network: "host"}}, dir, "docker.network"},
		"no containerd":      {&sessionspec.Transport{Containerd: &sessionspec.Containerd{Address: filepath.Join(dir, "no.sock")}}, dir, "unavailable"},
		"containerd user":    {&sessionspec.Transport{Containerd: &sessionspec.Containerd{User: "kennel", Address: filepath.Join(dir, "no.sock")}}, dir, "containerd.user"},
		"containerd and ssh": {&sessionspec.Transport{Containerd: &sessionspec.Containerd{}, SSH: &sessionspec.SSH{Target: "h"}}, dir, "names 2 transports"},
		"reserved env":       {&sessionspec.Transport{ArgvPrefix: []string{"x"}, Env: []string{"LANG", "KENNEL_KERNEL_OWNER"}}, dir, "env[1]"},
	} {
		p, err := k.Assemble(ctx, tc.spec, tc.dir)
		if err == nil || p != nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %+v, %v; want an error saying %q", name, p, err, tc.want)
		}
	}
}

// startAssembled assembles spec at dir with kit and starts a controller session on the
// parts (both released when the test ends).
func startAssembled(t *testing.T, kit *Kit, spec *sessionspec.Transport, dir string) (*controller.Session, *Parts) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := kit.Assemble(ctx, spec, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Release)
	b, err := images.Stub()
	if err != nil {
		t.Fatal(err)
	}
	s, err := controller.Start(ctx, p.Apply(controller.Options{Bundle: b.Hash(), StateDir: filepath.Join(t.TempDir(), "state")}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s, p
}
