package main

import (
	"fmt"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/fshost"
	"github.com/kennel-dev/kennel/pathmap"
)

// hostHandler returns the host-request handlers of a session whose working directory is
// dir, over the path map of mounts (nil: the identity map of dir), the map's sandbox path
// of dir, and a func that releases the map.
func hostHandler(dir string, mounts []pathmap.Mount) (controller.HostHandler, string, func(), error) {
	m, err := pathmap.New(pathmap.Config{Dir: dir, Mounts: mounts})
	if err != nil {
		return nil, "", nil, fmt.Errorf("path map: %w", err)
	}
	return fshost.New(m, fshost.Options{}), m.Dir(), func() { _ = m.Close() }, nil
}
