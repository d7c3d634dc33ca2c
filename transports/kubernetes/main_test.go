package kubernetes_test

import (
	"os"
	"testing"
	"time"

	kube "github.com/kennel-dev/kennel/transports/kubernetes"
	"github.com/kennel-dev/kennel/transports/kubernetes/kubetest"
)

// childEnv selects a helper role of the test binary (see TestMain).
const childEnv = "KENNEL_KUBERNETES_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "controller":
		os.Exit(childController())
	}
	os.Exit(kubetest.Main(m))
}

// client is a transport client of the test cluster.
func client(t testing.TB, c *kubetest.C) *kube.Client {
	t.Helper()
	cli, err := kube.NewClient(c.Config, c.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

// newTransport makes a transport of the test cluster with short graces for tests.
func newTransport(t testing.TB, o kube.Options) *kube.Transport {
	t.Helper()
	return newTransportOn(t, client(t, kubetest.Cluster(t)), o)
}

// newTransportOn is newTransport over cli (a pool's kernels are of its client alone).
func newTransportOn(t testing.TB, cli *kube.Client, o kube.Options) *kube.Transport {
	t.Helper()
	if o.StdinGrace == 0 {
		o.StdinGrace = time.Second
	}
	if o.StopGrace == 0 {
		o.StopGrace = time.Second
	}
	tr, err := kube.New(cli, o)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}
