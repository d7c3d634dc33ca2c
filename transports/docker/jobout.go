package docker

import (
	"path/filepath"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"

	"github.com/kennel-dev/kennel/transports"
)

// ContainerJobOutDir is where a run-mode kernel's container sees the session's job
// output directory (Spec.JobOutDir), bind-mounted; the kernel's Info.JobOutDir.
const ContainerJobOutDir = "/run/kennel-jobout"

// jobOutMount returns the bind mount of spec.JobOutDir into a run-mode container, and
// whether there is one: spec names an absolute directory, the engine is on this host
// (reached over a unix socket) and the runtime runs the container on this host's kernel
// (the engine's default, runc or crun). Elsewhere a file made there would not be the one
// the kernel writes (a remote engine's host), and the jobs' output goes through frames.
//
// The mount is writable, for the job's processes write to regular files in it; what the
// kernel's user can do there is what the directory's modes let it: the directory is the
// controller's, 0711, and holds only this session's jobs' output files, 0622 with random
// names, so a kernel of another uid can open a file it was named for writing (and
// append to it) and nothing more: it cannot list, create, remove or rename an entry. The
// controller opens its files before the kernel is told of them, and again (a restarted
// controller) only as regular files of its own, never through a symlink. It is the
// session's own and mounted into this session's containers alone.
func (t *Transport) jobOutMount(spec transports.Spec) (mount.Mount, bool) {
	if spec.JobOutDir == "" || !filepath.IsAbs(spec.JobOutDir) || strings.ContainsAny(spec.JobOutDir, ",\x00") ||
		!strings.HasPrefix(t.cli.DaemonHost(), "unix://") || !hostRuntime(t.opts.Runtime) {
		return mount.Mount{}, false
	}
	return mount.Mount{Type: mount.TypeBind, Source: spec.JobOutDir, Target: ContainerJobOutDir}, true
}

// jobOutDirOf returns ContainerJobOutDir when hc bind-mounts a job output directory there, else "".
func jobOutDirOf(hc *container.HostConfig) string {
	if hc == nil {
		return ""
	}
	for _, m := range hc.Mounts {
		if m.Target == ContainerJobOutDir && m.Type == mount.TypeBind {
			return ContainerJobOutDir
		}
	}
	return ""
}
