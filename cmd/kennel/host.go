package main

import "github.com/kennel-dev/kennel/controller"

// hostHandler returns the host-request handlers of a local session in dir.
func hostHandler(dir string) controller.HostHandler {
	return nil
}
