package kubernetes

import (
	"context"
	"encoding/json"
	"strings"
)

// Unserved is the host handler of a session whose kernel's files the controller does not
// see (Options.HostFiles failed): it answers every fs.* request with the protocol code
// "unavailable" and Reason's text, and serves nothing else. A session gives it to the
// controller in place of a path-map handler, so a kernel is told why, never served other
// files under the same paths.
type Unserved struct {
	// Reason says why the files are not served (HostFiles' error). Required.
	Reason error
}

// Serves reports true for the fs.* requests.
func (u Unserved) Serves(typ string) bool { return strings.HasPrefix(typ, "fs.") }

// Serve answers unavailable.
func (u Unserved) Serve(context.Context, string, json.RawMessage) (any, error) {
	return nil, unavailable{u.Reason}
}

// unavailable is an error with the protocol code "unavailable" (its Code method).
type unavailable struct{ err error }

func (e unavailable) Error() string { return e.err.Error() }
func (e unavailable) Unwrap() error { return e.err }
func (e unavailable) Code() string  { return "unavailable" }
