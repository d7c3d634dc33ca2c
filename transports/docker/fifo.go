package docker

import (
	"path/filepath"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"

	"github.com/kennel-dev/kennel/transports"
)

// ContainerFIFODir is where a run-mode kernel's container sees the session's FIFO
// directory (Spec.FIFODir), bind-mounted read-only; the kernel's Info.FIFODir.
const ContainerFIFODir = "/run/kennel-fifo"

// fifoMount returns the bind mount of spec.FIFODir into a run-mode container, and whether
// there is one: spec names an absolute directory, the engine is on this host (reached
// over a unix socket) and the runtime runs the container on this host's kernel (the
// engine's default, runc or crun). Elsewhere a FIFO made there would be another kernel's
// (a remote engine's host, gVisor's sentry, a VM's guest), and the jobs' output goes
// through frames. An engine whose default runtime is such a one is caught by the kernel
// itself: the FIFO it opens has no reader in its kernel, so it falls back to frames.
//
// The mount is read-only: through it the kernel can open the FIFOs the controller made
// (for writing only, being 0622 and not the controller's uid, or its own jobs' FIFOs
// either way when it is the controller's uid) and nothing more: it cannot create, remove,
// rename or chmod an entry, and the directory (0711) holds nothing but this session's
// FIFOs. It is the session's own and mounted into this session's containers alone.
func (t *Transport) fifoMount(spec transports.Spec) (mount.Mount, bool) {
	if spec.FIFODir == "" || !filepath.IsAbs(spec.FIFODir) || strings.ContainsAny(spec.FIFODir, ",\x00") {
		return mount.Mount{}, false
	}
	if !strings.HasPrefix(t.cli.DaemonHost(), "unix://") {
		return mount.Mount{}, false
	}
	switch t.opts.Runtime {
	case "", "runc", "crun", "io.containerd.runc.v2":
	default:
		return mount.Mount{}, false
	}
	return mount.Mount{Type: mount.TypeBind, Source: spec.FIFODir, Target: ContainerFIFODir, ReadOnly: true}, true
}

// fifoDirOf returns ContainerFIFODir when hc bind-mounts a FIFO directory there, else "".
func fifoDirOf(hc *container.HostConfig) string {
	if hc == nil {
		return ""
	}
	for _, m := range hc.Mounts {
		if m.Target == ContainerFIFODir && m.Type == mount.TypeBind {
			return ContainerFIFODir
		}
	}
	return ""
}
