package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kennel-dev/kennel/transports/docker"
)

// The labels of every kernel's pod and NetworkPolicy. Label values are short and of a
// restricted alphabet, so the exact session id and the controller's identity are in
// annotations; the labels are what a selector finds.
const (
	// LabelKennel marks an object as a kennel kernel's ("1").
	LabelKennel = "kennel.dev/kernel"
	// LabelSession holds the session id, or when that is no valid label value "h" and
	// the first 40 hex digits of its SHA-256 (AnnotationSession holds it whole).
	LabelSession = "kennel.dev/session"
	// LabelController holds the first 40 hex digits of the SHA-256 of the owning
	// controller's id (docker.Controller.ID): one controller instance's objects.
	LabelController = "kennel.dev/controller"
	// LabelPod holds the pod's own name: its NetworkPolicy selects it by it.
	LabelPod = "kennel.dev/pod"
	// LabelDetached marks the pod of a detached kernel ("1"): it outlives its controller
	// and is not a dead controller's to sweep while it runs.
	LabelDetached = "kennel.dev/detached"
	// LabelPool marks the pod of a kernel a Pool started before its session ("1"); it is a
	// detached kernel's pod too, and keeps the label after its hand-out.
	LabelPool = "kennel.dev/pool"
)

// The annotations of every kernel's pod and NetworkPolicy.
const (
	// AnnotationSession holds the session id.
	AnnotationSession = "kennel.dev/session"
	// AnnotationController holds the owning controller's id (docker.Controller.ID);
	// AnnotationHost, AnnotationBoot, AnnotationPID and AnnotationStart its parts, as the
	// Docker transport's labels do.
	AnnotationController = "kennel.dev/controller"
	AnnotationHost       = AnnotationController + ".host"
	AnnotationBoot       = AnnotationController + ".boot"
	AnnotationPID        = AnnotationController + ".pid"
	AnnotationStart      = AnnotationController + ".start"
)

// labelValue is s when it is a valid label value, else "h" and 40 hex digits of its hash.
func labelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	return "h" + hashOf(s)
}

func hashOf(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:20])
}

// controllerLabel is the label value of controller c.
func controllerLabel(c docker.Controller) string { return hashOf(c.ID()) }

// ownerMeta returns the labels and annotations of an object of controller c for session
// (no session ones when session is "") and pod (none when "").
func ownerMeta(c docker.Controller, session, pod string) (labels, annotations map[string]string) {
	labels = map[string]string{LabelKennel: "1", LabelController: controllerLabel(c)}
	annotations = c.Meta(AnnotationController)
	if session != "" {
		labels[LabelSession] = labelValue(session)
		annotations[AnnotationSession] = session
	}
	if pod != "" {
		labels[LabelPod] = pod
	}
	return labels, annotations
}

// ownerOf reads an object's owner back from its annotations; ok is false when they are
// not a whole identity, or its label is not that identity's.
func ownerOf(labels, annotations map[string]string) (docker.Controller, bool) {
	c, ok := docker.ControllerOf(annotations, AnnotationController)
	return c, ok && labels[LabelController] == controllerLabel(c)
}
