package reaper

// init runs the reaper (Main) before the packages that import this one, and those
// initialized after it, have run their own init: a reaper process is the kennel binary
// re-executed, and it needs none of the clients (Kubernetes, containerd, gRPC) whose
// initialization would otherwise delay every local kernel's start.
func init() { Main() }
