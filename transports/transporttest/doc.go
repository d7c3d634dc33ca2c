// Package transporttest is the conformance suite every kernel transport runs: one table of
// cases (start and hello, a cell round trip, environment, working directory, exit at stdin
// EOF, a staged kill that leaves no process of the kernel or its cells alive, Kill twice,
// start failures, no leftover child processes), run against a real kernel stub.
//
// A transport's test calls Run with a constructor:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, func(t *testing.T) transports.Transport {
//			return local.New(local.Options{CacheDir: t.TempDir()})
//		})
//	}
//
// Cases a transport cannot support are skipped by its Capabilities: checks of pids
// against /proc need HostPIDs, the host-environment case needs HostEnv, and the
// working-directory and missing-directory cases compare host paths only with SameFS. A
// transport whose kernels see other paths passes WithSpec to set Spec.Dir (and
// Spec.Python) to what exists in its sandbox.
//
// A transport's own tests speak to its kernels with the same code: Start starts a kernel
// and reads its hello, and its Client runs cells (Run, Execute), starts jobs and reads
// frames; Stop kills a kernel and waits for it. BenchStartToHello times Start until the
// hello, so transports compared by it run the same benchmark.
//
// Frames are read and written as NDJSON per docs/protocol.md with encoding/json: the suite
// checks behaviour, not speed. The suite reads /proc to find the test process's children,
// so it runs on Linux.
package transporttest
