// Package sessionspec is the one description of where a session's kernel runs: a
// Transport naming exactly one kind (local, a wrapper argv, a Docker container, a host
// over ssh, a containerd container) with that kind's options, the path map and the
// environment it takes.
//
// The kernelTransport setting, the flags of `kennel run` and `kennel create`, and the
// API's POST /sessions `transport` all decode into it, and it is checked in one place
// (Validate) before anything starts; package launch turns it into a running session's
// parts. It fails closed: a description that names no kind, several, an unknown field or
// a bad value is refused with every bad field named, and only an absent description (a
// nil *Transport) or one that says "local" runs a kernel on the host.
//
//	t, err := sessionspec.Decode([]byte(`{"docker": {"memory": "2g"}, "pathMap": [{"sandbox": "/work", "host": "/home/me/p"}]}`))
//	kind, _ := t.Kind() // "docker"
package sessionspec
