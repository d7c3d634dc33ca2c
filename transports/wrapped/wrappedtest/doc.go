// Package wrappedtest builds wrapped transports over two real wrappers for tests: a plain
// process wrapper (`setsid -w sh -c 'exec "$@"' --`, standing in for `docker exec -i`)
// and a real sandbox (bubblewrap: the system read-only, a host directory bound at
// another path, its own pid namespace), each with the path map that matches it.
//
//	sb := wrappedtest.Bwrap(t, wrapped.Options{})
//	// sb.Transport runs kernels in bwrap; sb.Map maps sb.SandboxDir ("/work") to
//	// sb.HostDir (a fresh t.TempDir()); start a session in sb.HostDir with
//	// SandboxDir sb.Map.Dir() and serve fs.* requests through sb.Map.
//
// A tool that is missing (setsid, sh, bwrap, /usr/bin/python3) skips the test, or fails
// it under CI=true.
package wrappedtest
