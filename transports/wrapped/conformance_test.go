package wrapped_test

import (
	"testing"
	"time"

	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/transporttest"
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
