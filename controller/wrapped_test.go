package controller_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/fshost"
	"github.com/kennel-dev/kennel/transports/wrapped"
	"github.com/kennel-dev/kennel/transports/wrapped/wrappedtest"
)

// TestAWrappedKernelSeesSandboxPathsAndGetsTypedRefusals runs the real stub under two real
// wrappers whose sandbox sees the host directory at another path (bwrap: /work) or at the
// same one (setsid): the cell's cwd is the sandbox path, fs.* requests carry sandbox paths
// in and get sandbox paths back, the environment is exactly the named variables plus the
// kernel's own, and a path outside every mount is refused with the typed refusal.
func TestAWrappedKernelSeesSandboxPathsAndGetsTypedRefusals(t *testing.T) {
	for name, mk := range map[string]func(testing.TB, wrapped.Options) *wrappedtest.Sandbox{
		"bwrap":  wrappedtest.Bwrap,
		"setsid": wrappedtest.Setsid,
	} {
		t.Run(name, func(t *testing.T) {
			sb := mk(t, wrapped.Options{})
			if err := os.WriteFile(filepath.Join(sb.HostDir, "data.txt"), []byte("alpha\nbeta\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			s := startSession(t, controller.Options{
				Transport:  sb.Transport,
				Dir:        sb.HostDir,
				SandboxDir: sb.Map.Dir(),
				Env:        []string{"KENNEL_TEST_NAMED=yes"},
				Handler:    fshost.New(sb.Map, fshost.Options{}),
			})
			execute(t, s, "import kennel, os")
			want := sb.Map.Dir()
			for _, tc := range []struct{ code, want string }{
				{"os.getcwd()", "'" + want + "'"},
				{"r = kennel.fs.read('data.txt')\n(r['content'], r['absolute'])", "('alpha\\nbeta\\n', '" + want + "/data.txt')"},
				{"w = kennel.fs.write('" + want + "/sub/new.txt', 'x')\nw['absolute']", "'" + want + "/sub/new.txt'"},
				{"sorted(kennel.fs.glob('**/*.txt')['paths'])", "['" + want + "/data.txt', '" + want + "/sub/new.txt']"},
				{"try:\n    kennel.fs.read('/etc/passwd')\nexcept kennel.HostError as e:\n    c = (e.code, e.reason)\nc", "('outside', 'outside')"},
				{"sorted(k for k in os.environ if not k.startswith('KENNEL_KERNEL_') and k not in ('PATH', 'MALLOC_MMAP_THRESHOLD_'))", "['KENNEL_TEST_NAMED']"},
			} {
				res, _ := execute(t, s, tc.code)
				if res.Status != "ok" || res.Result == nil || *res.Result != tc.want {
					t.Errorf("%s:\n got %+v (error %+v)\nwant %s", strings.SplitN(tc.code, "\n", 2)[0], res, res.Error, tc.want)
				}
			}
			if b, err := os.ReadFile(filepath.Join(sb.HostDir, "sub", "new.txt")); err != nil || string(b) != "x" {
				t.Fatalf("fs.write did not land on the host: %q, %v", b, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
