package containerd

import "github.com/kennel-dev/kennel/transports/docker"

// The labels every kernel container, its snapshot and its lease carry: the Docker
// transport's, so one controller identity rules both engines' sweeps.
const (
	// LabelKennel marks an object as kennel's ("1").
	LabelKennel = docker.LabelKennel
	// LabelSession holds the session id.
	LabelSession = docker.LabelSession
)

// ownerLabels are the labels of an object owned by controller c for session (no session
// label when session is ""); docker.ControllerOf under docker.LabelController reads the
// owner back.
func ownerLabels(c docker.Controller, session string) map[string]string {
	l := c.Meta(docker.LabelController)
	l[LabelKennel] = "1"
	if session != "" {
		l[LabelSession] = session
	}
	return l
}
