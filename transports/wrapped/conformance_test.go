package wrapped_test

import (
	"testing"
	"time"

	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/transporttest"
	"github.com/kennel-dev/kennel/transports/wrapped"
	"github.com/kennel-dev/kennel/transports/wrapped/wrappedtest"
)

// TestConformance runs the transport conformance suite through each real wrapper. Every
// kernel carries a marker variable; after each case the host's /proc is searched for
// processes holding it. In bwrap (its own pid namespace) none may be left. Under setsid
// the suite's cells detach sleepers from the kernel (a new session, a double fork) that
// no stub shutdown ends, as the package documents: they are removed, not counted.
func TestConformance(t *testing.T) {
	for _, w := range wrappers {
		t.Run(w.name, func(t *testing.T) {
			key, value := marker()
			transporttest.Run(t, func(t *testing.T) transports.Transport {
				sb := w.make(t, testOptions())
				t.Cleanup(func() {
					d := 10 * time.Second
					if !w.ownPIDs {
						d = 0
					}
					left := eventuallyNoneMarked(key, value, d)
					if w.ownPIDs && len(left) > 0 {
						t.Errorf("processes %v of the kernel outlived it in %s", left, w.name)
					} else if len(left) > 0 {
						t.Logf("removed %d process(es) a cell detached from the kernel", len(left))
					}
				})
				return sb.Transport
			}, transporttest.WithSpec(func(t *testing.T, s *transports.Spec) {
				if w.ownPIDs {
					s.Dir = "/work"
				}
				s.Env = append(s.Env, key+"="+value)
			}))
		})
	}
}

// detachedWrapper names one real wrapper whose kernels can be detached.
type detachedWrapper struct {
	name string
	// make makes a transport whose run directories are in the host directory runDir.
	make func(t testing.TB, base wrapped.Options, runDir string) *wrappedtest.Sandbox
	// sandboxDir is the Spec.Dir of a kernel ("" for a fresh host directory).
	sandboxDir string
}

// detachedWrappers are the wrappers whose kernels can be detached: a plain process
// wrapper, and bwrap without a pid namespace of its own.
var detachedWrappers = []detachedWrapper{
	{"setsid", wrappedtest.SetsidDetached, ""},
	{"bwrap", wrappedtest.BwrapDetached, wrappedtest.SandboxDir},
}

// TestDetachedConformance runs the suite against detached kernels (Options.RunDir),
// reached over their sockets through bridges run under each wrapper, CutAndReattach and
// DetachAndReattach included (the transports of one case share their run directories, as
// a restarted controller's do). After each case no process of the kernel may be left: a
// detached kernel is its processes' subreaper, whose end sweeps them all.
func TestDetachedConformance(t *testing.T) {
	for _, w := range detachedWrappers {
		t.Run(w.name, func(t *testing.T) {
			key, value := marker()
			runDirs := map[string]string{} // by case
			transporttest.Run(t, func(t *testing.T) transports.Transport {
				run, ok := runDirs[t.Name()]
				if !ok {
					run = t.TempDir()
					runDirs[t.Name()] = run
					t.Cleanup(func() {
						if left := eventuallyNoneMarked(key, value, 10*time.Second); len(left) > 0 {
							t.Errorf("processes %v of the kernel outlived it in %s", left, w.name)
						}
					})
				}
				return w.make(t, testOptions(), run).Transport
			}, transporttest.WithSpec(func(t *testing.T, s *transports.Spec) {
				if w.sandboxDir != "" {
					s.Dir = w.sandboxDir
				}
				s.Env = append(s.Env, key+"="+value)
			}))
		})
	}
}
