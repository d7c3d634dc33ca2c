package local_test

import (
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/local"
	"github.com/kennel-dev/kennel/transports/transporttest"
)

// python returns the real interpreter, resolved once per test binary run, or skips
// (fails under CI=true) when there is none.
var python = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		return "", err
	}
	return string(out[:len(out)-1]), nil
})

func needPython(t testing.TB) string {
	t.Helper()
	p, err := python()
	if err != nil {
		testneed.Missing(t, "python3", err)
	}
	testneed.Tools(t, "sleep", "sh")
	return p
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
