package containerd

import (
	"strconv"

	"github.com/kennel-dev/kennel/transports/docker"
)

// The labels every kernel container, its snapshot and its lease carry: the Docker
// transport's, so one controller identity rules both engines' sweeps.
const (
	// LabelKennel marks an object as kennel's ("1").
	LabelKennel = docker.LabelKennel
	// LabelSession holds the session id.
	LabelSession = docker.LabelSession
)

// ownerLabels are the labels of an object owned by controller c for session (no session
// label when session is "").
func ownerLabels(c docker.Controller, session string) map[string]string {
	l := map[string]string{
		LabelKennel:            "1",
		docker.LabelController: c.ID(),
		docker.LabelHost:       c.Host,
		docker.LabelBoot:       c.Boot,
		docker.LabelPID:        strconv.Itoa(c.PID),
		docker.LabelStart:      strconv.FormatUint(c.Start, 10),
	}
	if session != "" {
		l[LabelSession] = session
	}
	return l
}

// ownerOf reads an object's owner back from its labels; ok is false when they are not a
// whole identity.
func ownerOf(l map[string]string) (docker.Controller, bool) {
	pid, err1 := strconv.Atoi(l[docker.LabelPID])
	start, err2 := strconv.ParseUint(l[docker.LabelStart], 10, 64)
	c := docker.Controller{Host: l[docker.LabelHost], Boot: l[docker.LabelBoot], PID: pid, Start: start}
	if err1 != nil || err2 != nil || c.Host == "" || c.Boot == "" || pid <= 0 || c.ID() != l[docker.LabelController] {
		return c, false
	}
	return c, true
}
