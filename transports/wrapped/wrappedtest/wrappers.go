package wrappedtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/transports/wrapped"
)

// SandboxDir is where Bwrap's sandbox sees its host directory.
const SandboxDir = "/work"

// Sandbox is a wrapped transport with the path map of the sandbox it runs kernels in.
type Sandbox struct {
	// Transport starts kernels in the sandbox.
	Transport *wrapped.Transport
	// Map maps SandboxDir to HostDir; it is closed when the test ends.
	Map *pathmap.Map
	// HostDir is the host directory the kernel works in (a fresh t.TempDir()).
	HostDir string
	// SandboxDir is the path of HostDir inside the sandbox, and the kernel's Spec.Dir.
	SandboxDir string
}

// SandboxPython returns Debian's /usr/bin/python3: the interpreter the sandboxes here
// have (bwrap binds /usr, not the host's pyenv tree).
func SandboxPython(t testing.TB) string {
	t.Helper()
	const p = "/usr/bin/python3"
	if _, err := exec.LookPath(p); err != nil {
		testneed.Missing(t, p+" (Debian's python3 package)", err)
	}
	return p
}

// SetsidPrefix is the plain process wrapper: the kernel runs in a new session, as a
// child of setsid, which waits for it and passes on its exit status.
func SetsidPrefix(t testing.TB) []string {
	t.Helper()
	testneed.Tools(t, "setsid", "sh", "env")
	return []string{"setsid", "-w", "sh", "-c", `exec "$@"`, "--"}
}

// BwrapPrefix is a bubblewrap sandbox: /usr and /etc read-only (with the merged-/usr
// links), a private /tmp, /proc and /dev, its own pid namespace, hostDir read-write at
// sandboxDir, and death with its parent.
func BwrapPrefix(t testing.TB, hostDir, sandboxDir string) []string {
	t.Helper()
	testneed.Tools(t, "bwrap")
	argv := []string{"bwrap", "--die-with-parent", "--unshare-pid",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"}
	for _, p := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				t.Fatal(err)
			}
			argv = append(argv, "--symlink", target, p)
		case fi.IsDir():
			argv = append(argv, "--ro-bind", p, p)
		}
	}
	return append(argv, "--bind", hostDir, sandboxDir, "--chdir", sandboxDir, "--")
}

// Setsid returns a transport under the setsid wrapper (base's other fields kept, Python
// defaulting to SandboxPython) with the identity path map of a fresh host directory: a
// plain process wrapper shares the host's file system.
func Setsid(t testing.TB, base wrapped.Options) *Sandbox {
	t.Helper()
	base.ArgvPrefix = SetsidPrefix(t)
	dir := realTempDir(t)
	return newSandbox(t, base, dir, dir)
}

// Bwrap returns a transport under bubblewrap (base's other fields kept, Python defaulting
// to SandboxPython) whose sandbox sees a fresh host directory at SandboxDir, with the
// path map that says so.
func Bwrap(t testing.TB, base wrapped.Options) *Sandbox {
	t.Helper()
	dir := realTempDir(t)
	base.ArgvPrefix = BwrapPrefix(t, dir, SandboxDir)
	return newSandbox(t, base, dir, SandboxDir)
}

// RunRoot is where BwrapDetached's sandbox sees its run directory root.
const RunRoot = "/run/kennel"

// SetsidDetached is Setsid with detached kernels: base.RunDir is runDir, a host
// directory (the plain process wrapper's sandbox is the host), or a fresh one when empty.
// Transports made with the same runDir reach each other's kernels (Reattach).
func SetsidDetached(t testing.TB, base wrapped.Options, runDir string) *Sandbox {
	t.Helper()
	if runDir == "" {
		runDir = realTempDir(t)
	}
	base.RunDir = filepath.Join(runDir, "run")
	return Setsid(t, base)
}

// BwrapDetachedPrefix is BwrapPrefix for detached kernels: no pid namespace of the
// sandbox's own (each bwrap command would get another, where the kernel's pids name no
// process, and with --die-with-parent its end would end the kernel; --die-with-parent
// alone ends only the command), and the host directory runDir bound at RunRoot, outside
// the private /tmp of each bwrap, so that every command of the transport sees the same
// run directories.
func BwrapDetachedPrefix(t testing.TB, hostDir, sandboxDir, runDir string) []string {
	t.Helper()
	argv := BwrapPrefix(t, hostDir, sandboxDir)
	argv = slices.DeleteFunc(argv, func(a string) bool { return a == "--unshare-pid" })
	return slices.Insert(argv, len(argv)-1, "--bind", runDir, RunRoot)
}

// BwrapDetached returns a transport under bubblewrap whose kernels are detached
// (BwrapDetachedPrefix of runDir, a host directory, or a fresh one when empty;
// base.RunDir is RunRoot), with Bwrap's path map. Transports made with the same runDir
// reach each other's kernels (Reattach).
func BwrapDetached(t testing.TB, base wrapped.Options, runDir string) *Sandbox {
	t.Helper()
	if runDir == "" {
		runDir = realTempDir(t)
	}
	dir := realTempDir(t)
	base.ArgvPrefix = BwrapDetachedPrefix(t, dir, SandboxDir, runDir)
	base.RunDir = RunRoot
	return newSandbox(t, base, dir, SandboxDir)
}

// newSandbox is the Sandbox of a transport with opts, Python defaulting to SandboxPython.
func newSandbox(t testing.TB, opts wrapped.Options, hostDir, sandboxDir string) *Sandbox {
	t.Helper()
	if opts.Python == "" {
		opts.Python = SandboxPython(t)
	}
	m, err := pathmap.New(pathmap.Config{
		Dir:    hostDir,
		Mounts: []pathmap.Mount{{Sandbox: sandboxDir, Host: hostDir}},
	})
	if err != nil {
		t.Fatalf("path map: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return &Sandbox{Transport: wrapped.New(opts), Map: m, HostDir: hostDir, SandboxDir: m.Dir()}
}

// realTempDir is a fresh t.TempDir() with its symlinks resolved.
func realTempDir(t testing.TB) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
