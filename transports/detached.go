package transports

import (
	"context"
	"time"
)

// Record is what a controller keeps to reach a detached kernel again: from this process
// after a Detach, or from a later controller process after this one ended. It is plain
// data (JSON) for a store; its Token is a secret that proves the right to attach, so a
// record is kept only where the controller's own files are (0600).
type Record struct {
	// Transport is the kind's name (Info.Transport).
	Transport string `json:"transport"`
	// Kernel is the kernel's id: its run directory's name.
	Kernel string `json:"kernel"`
	// RunDir is the kernel's run directory, as its own host sees it.
	RunDir string `json:"run_dir"`
	// Token proves the right to attach.
	Token string `json:"token"`
	// PID, PGID and Leader are the kernel's process as its hello named it: its pid and
	// group on its own host and its start time (clock ticks since boot), so a pid given
	// to a later process is never taken for it.
	PID    int    `json:"pid"`
	PGID   int    `json:"pgid"`
	Leader uint64 `json:"leader"`
	// Applied is the highest kernel frame seq the controller applied (link.Options.Applied).
	Applied uint64 `json:"applied"`
	// Grace is how long the kernel lives with nothing attached (sent in every attach):
	// past it and a minute, a kernel out of reach has surely ended. Zero: unknown.
	Grace time.Duration `json:"grace,omitempty"`
	// Where is the transport's own locator of the kernel's host or sandbox (an ssh
	// target, a container id), or "".
	Where string `json:"where,omitempty"`
}

// Detachable is a detached kernel that can be let go: Detach closes its link and leaves
// it running alone for its grace. Wait then returns an error matching link.ErrDetached
// at once, or, where the transport still watches the kernel's end by other means (a
// local kernel that is this process's child, a Docker run-mode container), that end when
// it comes. Record says how to reach the kernel again. Record may be called at any time; its Applied grows as frames are
// applied.
type Detachable interface {
	Kernel
	Detach() error
	Record() Record
}

// Reattacher is a Transport whose detached kernels can be reached again from their
// Record. Reattach attaches to the kernel the record names and returns it as a Kernel
// whose Stdout begins with a hello (as Start's does) and then carries every frame the
// kernel still held after rec.Applied. A kernel proven gone (its socket gone, a refused
// attach, its process ended) is an error matching errdefs.ErrNotFound; a host or sandbox
// out of reach is errdefs.ErrUnavailable, the kernel maybe still running. ctx bounds
// only the attach.
type Reattacher interface {
	Reattach(ctx context.Context, rec Record) (Kernel, error)
}
