package docker

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/kennel-dev/kennel/internal/procfs"
)

// Labels every kernel container carries.
const (
	// LabelKennel marks a container as kennel's ("1").
	LabelKennel = "dev.kennel"
	// LabelSession holds the session id.
	LabelSession = "dev.kennel.session"
	// LabelController holds the owning controller's id (Controller.ID).
	LabelController = "dev.kennel.controller"
	// LabelHost, LabelBoot, LabelPID and LabelStart describe the owning controller
	// process: the host's name, its boot id, the pid and the pid's start time in clock
	// ticks since boot (/proc/PID/stat field 22), which tells a reused pid apart.
	LabelHost  = LabelController + ".host"
	LabelBoot  = LabelController + ".boot"
	LabelPID   = LabelController + ".pid"
	LabelStart = LabelController + ".start"
)

// Controller identifies a controller process: the owner of the containers it starts.
// Two live controllers never share an identity; a controller that died is told apart
// from a live process that reuses its pid by the start time.
type Controller struct {
	// Host is the host name; Boot the kernel's boot id (/proc/sys/kernel/random/boot_id).
	Host, Boot string
	// PID is the controller's process id; Start its start time in clock ticks after
	// boot.
	PID   int
	Start uint64
}

// ID is the identity as one label value: "host/boot/pid/start".
func (c Controller) ID() string {
	return c.Host + "/" + c.Boot + "/" + strconv.Itoa(c.PID) + "/" + strconv.FormatUint(c.Start, 10)
}

// IsZero reports whether c is the zero value.
func (c Controller) IsZero() bool { return c == Controller{} }

// Meta is c as labels (or annotations) under key: key holds ID, and key+".host",
// key+".boot", key+".pid" and key+".start" its parts (under LabelController: LabelHost,
// LabelBoot, LabelPID and LabelStart).
func (c Controller) Meta(key string) map[string]string {
	return map[string]string{
		key:            c.ID(),
		key + ".host":  c.Host,
		key + ".boot":  c.Boot,
		key + ".pid":   strconv.Itoa(c.PID),
		key + ".start": strconv.FormatUint(c.Start, 10),
	}
}

// ControllerOf reads a controller back from m as Meta wrote it under key; ok is false
// when m holds no whole identity that agrees with its ID.
func ControllerOf(m map[string]string, key string) (Controller, bool) {
	pid, err1 := strconv.Atoi(m[key+".pid"])
	start, err2 := strconv.ParseUint(m[key+".start"], 10, 64)
	c := Controller{Host: m[key+".host"], Boot: m[key+".boot"], PID: pid, Start: start}
	return c, err1 == nil && err2 == nil && c.Host != "" && c.Boot != "" && pid > 0 && c.ID() == m[key]
}

// errNoProc reports a process that does not exist (or whose stat cannot be read).
var errNoProc = errors.New("no such process")

// Self returns this process's identity.
func Self() (Controller, error) { return Process(os.Getpid()) }

// OrSelf is c, or this process's identity (Self) when c is the zero value.
func (c Controller) OrSelf() (Controller, error) {
	if c.IsZero() {
		return Self()
	}
	return c, nil
}

// Process returns the identity of the live process pid on this host.
func Process(pid int) (Controller, error) {
	host, err := os.Hostname()
	if err != nil {
		return Controller{}, fmt.Errorf("controller identity: %w", err)
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return Controller{}, fmt.Errorf("controller identity: %w", err)
	}
	st, err := procfs.Read(pid)
	if err != nil {
		return Controller{}, fmt.Errorf("controller identity: pid %d: %w: %w", pid, errNoProc, err)
	}
	return Controller{Host: host, Boot: strings.TrimSpace(string(boot)), PID: pid, Start: st.Start}, nil
}

// Sweepable is the owner rule of every sweep, for an object of session whose owner is c:
// self may remove it when c is self and keep (nil: none) does not keep session, or when
// c is a controller of self's host known to be gone (Alive).
func (c Controller) Sweepable(self Controller, keep func(session string) bool, session string) bool {
	if c == self {
		return keep == nil || !keep(session)
	}
	alive, known := c.Alive(self)
	return known && !alive
}

// Alive reports whether the controller c is a live process on this host: same host
// name and boot, and its pid runs with the same start time. A controller of another
// host is never judged dead here (ok false): only its own host can tell.
func (c Controller) Alive(self Controller) (alive, ok bool) {
	if c.Host != self.Host {
		return false, false
	}
	if c.Boot != self.Boot {
		return false, true // the machine rebooted since: that process is gone
	}
	st, err := procfs.Read(c.PID)
	if err != nil {
		return false, true
	}
	if st.Start != c.Start {
		return false, true // the pid was reused
	}
	// A zombie is dead for our purpose.
	return !st.Zombie(), true
}
