package local_test

import (
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/local"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// needPython returns the real interpreter and requires the tools the tests' kernels run.
func needPython(t testing.TB) string {
	t.Helper()
	testneed.Tools(t, "sleep", "sh")
	return testneed.Python(t)
}

// newTransport makes a Transport with a private bundle cache and short graces.
func newTransport(t testing.TB) *local.Transport {
	p := needPython(t)
	return local.New(local.Options{
		CacheDir:   t.TempDir(),
		Python:     p,
		StdinGrace: 500 * time.Millisecond,
		TermGrace:  500 * time.Millisecond,
	})
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) transports.Transport { return newTransport(t) })
}
