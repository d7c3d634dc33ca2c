package kubernetes_test

import (
	"testing"
	"time"

	"github.com/kennel-dev/kennel/transports"
	kube "github.com/kennel-dev/kennel/transports/kubernetes"
	"github.com/kennel-dev/kennel/transports/kubernetes/kubetest"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// TestConformance runs the transport conformance suite: each kernel an exec in a
// locked-down pod of its own in the test cluster, working in the pod's /tmp.
func TestConformance(t *testing.T) {
	kubetest.Cluster(t) // started before the suite counts the test's children
	transporttest.Run(t, func(t *testing.T) transports.Transport {
		return newTransport(t, kube.Options{})
	}, transporttest.WithSpec(func(t *testing.T, s *transports.Spec) {
		s.Dir = "/tmp"
	}), transporttest.WithTimeout(60*time.Second))
}

// TestConformanceDetached runs the suite on detached kernels: each started beside a bridge
// in its pod, its run directory on the pod's emptyDir, reached again by an exec of the
// bridge's attach.
func TestConformanceDetached(t *testing.T) {
	kubetest.Cluster(t)
	transporttest.Run(t, func(t *testing.T) transports.Transport {
		return newTransport(t, kube.Options{Detached: true})
	}, transporttest.WithSpec(func(t *testing.T, s *transports.Spec) {
		s.Dir = "/tmp"
	}), transporttest.WithTimeout(60*time.Second))
}

// TestProtocols: over the WebSocket alone (v5, no fallback: the default's first choice)
// and over SPDY alone (the fallback, for an API server before 1.30), a kernel starts, runs
// cells, and ends at its stdin's end (v5's CLOSE; SPDY's half-close) with exit 0.
func TestProtocols(t *testing.T) {
	c := kubetest.Cluster(t)
	for _, protocol := range []string{"websocket", "spdy"} {
		t.Run(protocol, func(t *testing.T) {
			cli := client(t, c)
			kube.UseOnly(cli, protocol)
			tr, err := kube.New(cli, kube.Options{StdinGrace: time.Second, StopGrace: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			k, cl := transporttest.Start(t, tr, transports.Spec{SessionID: protocol, Dir: "/tmp"})
			if out, err := cl.Run("print(6 * 7)"); err != nil || out != "42\n" {
				t.Fatalf("a cell: %q, %v", out, err)
			}
			if err := k.Stdin().Close(); err != nil {
				t.Fatal(err)
			}
			if exit, err := k.Wait(); err != nil || exit != (transports.Exit{}) {
				t.Fatalf("after stdin's end: %+v, %v; want a clean exit 0", exit, err)
			}
		})
	}
}
