package fshost_test

import (
	"testing"

	"github.com/kennel-dev/kennel/fshost"
	"github.com/kennel-dev/kennel/fshost/fshosttest"
	"github.com/kennel-dev/kennel/pathmap"
)

// The conformance table over a local path map that shows the served directory at /work.
func TestConformance(t *testing.T) {
	fshosttest.Run(t, func(t *testing.T, dir string, readOnly bool) fshosttest.Served {
		m, err := pathmap.New(pathmap.Config{Dir: dir, Mounts: []pathmap.Mount{{Sandbox: "/work", Host: dir, ReadOnly: readOnly}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return fshosttest.Served{Handler: fshost.New(m, fshost.Options{}), Dir: "/work"}
	})
}
