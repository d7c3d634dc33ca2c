package containerd_test

import (
	"os"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"

	ctrd "github.com/kennel-dev/kennel/transports/containerd"
	"github.com/kennel-dev/kennel/transports/containerd/containerdtest"
)

// childEnv selects a helper role of the test binary (see TestMain).
const childEnv = "KENNEL_CONTAINERD_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "controller":
		os.Exit(childController())
	}
	os.Exit(containerdtest.Main(m))
}

// newTransport makes a transport with short graces for tests.
func newTransport(t testing.TB, cli *client.Client, o ctrd.Options) *ctrd.Transport {
	t.Helper()
	if o.StdinGrace == 0 {
		o.StdinGrace = time.Second
	}
	if o.StopGrace == 0 {
		o.StopGrace = time.Second
	}
	tr, err := ctrd.New(cli, o)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}
