package containerd

import (
	"context"
	"fmt"
	"os"

	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/images/kernelimage"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/limits"
)

// specOpts is the OCI spec a kernel's container gets, on top of the client's default Linux
// spec (namespaces pid, ipc, uts, mount and network: a network namespace of its own, with
// only loopback; /proc, /dev, /sys read-only; its masked and read-only paths): the whole
// lock-down lives here.
//
// The process runs the image's entrypoint (or Spec.Python with the stub) in Spec.Dir, with
// the image's environment (the caller adds the transport's over it: oci.WithEnv), as numeric uid:gid with no supplementary
// groups (read from nothing on the client), no capabilities in any set, no new privileges,
// under the default seccomp profile; the root file system is read-only with a tmpfs at
// /tmp; the path map's mounts are bind mounts (read-only where the mount is); memory,
// memory+swap, CPU and pids are limited.
func (t *Transport) specOpts(img image, spec transports.Spec, uid, gid uint32) []oci.SpecOpts {
	o := t.opts
	args := append(append([]string(nil), img.config.Entrypoint...), img.config.Cmd...)
	if spec.Python != "" {
		args = images.KernelArgv(spec.Python, kernelimage.StubDir)
	}
	mounts := []specs.Mount{{
		Destination: "/tmp",
		Type:        "tmpfs",
		Source:      "tmpfs",
		Options:     []string{"nosuid", "nodev", fmt.Sprintf("size=%d", limits.Of(o.TmpfsSize, DefaultTmpfsSize)), "mode=1777"},
	}}
	for _, m := range o.Mounts {
		opts := []string{"rbind", "rprivate", "nosuid", "nodev"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		mounts = append(mounts, specs.Mount{Destination: m.Sandbox, Type: "bind", Source: m.Host, Options: opts})
	}
	opts := []oci.SpecOpts{
		func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
			s.Process.Env = append([]string(nil), img.config.Env...)
			s.Process.Args = args
			s.Process.Terminal = false
			return nil
		},
		oci.WithProcessCwd(spec.Dir),
		oci.WithUIDGID(uid, gid),
		func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
			s.Process.User.AdditionalGids = nil
			s.Process.User.Username = ""
			s.Process.Capabilities = &specs.LinuxCapabilities{
				Bounding: []string{}, Effective: []string{}, Permitted: []string{}, Ambient: []string{}, Inheritable: []string{},
			}
			return nil
		},
		oci.WithNoNewPrivileges,
		oci.WithRootFSReadonly(),
		oci.WithHostname("kennel"),
		oci.WithMounts(mounts),
	}
	if m := limits.Of(o.Memory, DefaultMemory); m > 0 {
		opts = append(opts, oci.WithMemoryLimit(uint64(m)))
		if swapLimited() {
			opts = append(opts, oci.WithMemorySwap(m))
		}
	}
	if q := limits.Of(o.CPUQuota, DefaultCPUQuota); q > 0 {
		opts = append(opts, oci.WithCPUCFS(q, DefaultCPUPeriod))
	}
	if p := limits.Of(o.Pids, DefaultPids); p > 0 {
		opts = append(opts, oci.WithPidsLimit(p))
	}
	// Last: the default profile allows what the (empty) capability sets allow.
	return append(opts, seccomp.WithDefaultProfile())
}

// swapLimited reports whether the host's cgroups can limit memory+swap: cgroup v2, or v1
// with swap accounting (memory.memsw.*). Where they cannot, the memory limit alone holds
// (as Docker does, with a warning).
func swapLimited() bool {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return true
	}
	_, err := os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
	return err == nil
}
