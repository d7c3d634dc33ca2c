package kubernetes

import (
	"cmp"
	_ "embed"
	"fmt"
	"path"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
	"github.com/kennel-dev/kennel/transports/internal/limits"
)

//go:embed init.py
var initSource string

// initProgram is the pods' main process (init.py) as a -c program.
var initProgram = images.PythonProgram(initSource)

// Times of the pods' main process (init.py): it exits this long after the last other
// process of the pod ended, or after its own start when no other ever came.
const (
	initIdle  = 30 // seconds
	initFirst = 600
)

// podSpec is a kernel's pod: the whole lock-down lives here and in policy.
//
// One container, Container, runs init.py as its main process (the kernel is an exec beside
// it) as the numeric uid:gid, with runAsNonRoot, no supplementary group (the runtime adds
// the gid itself), every capability dropped, no privilege escalation, the runtime's default seccomp profile, a read-only
// root file system, a memory-backed emptyDir at /tmp, and equal requests and limits of
// memory and CPU; the pod mounts no service-account token, gets no service links, never
// restarts, shares no host namespace and nothing with other containers (it has none). The
// path map's mounts are hostPath volumes of type Directory (read-only where the mount is),
// the claims PersistentVolumeClaim volumes; a detached kernel's pod has an emptyDir at
// RunRoot for its run directory.
func (t *Transport) podSpec(name, session, python string, uid, gid int64) *corev1.Pod {
	o := t.opts
	labels, annotations := ownerMeta(o.Controller, session, name)
	if o.Detached {
		labels[LabelDetached] = "1"
	}
	no, yes := false, true
	grace := o.stopSeconds()
	tmp := resource.NewQuantity(limits.Of(o.TmpSize, DefaultTmpSize), resource.BinarySI)
	volumes := []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: tmp}}}}
	mounts := []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}
	if o.Detached {
		volumes = append(volumes, corev1.Volume{Name: "run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "run", MountPath: RunRoot})
	}
	dir := corev1.HostPathDirectory
	for i, m := range o.Mounts {
		v := "host-" + strconv.Itoa(i)
		volumes = append(volumes, corev1.Volume{Name: v, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path.Clean(m.Host), Type: &dir}}})
		mounts = append(mounts, corev1.VolumeMount{Name: v, MountPath: path.Clean(m.Sandbox), ReadOnly: m.ReadOnly})
	}
	for i, c := range o.Claims {
		v := "claim-" + strconv.Itoa(i)
		volumes = append(volumes, corev1.Volume{Name: v, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.Name, ReadOnly: c.ReadOnly}}})
		mounts = append(mounts, corev1.VolumeMount{Name: v, MountPath: path.Clean(c.Sandbox), ReadOnly: c.ReadOnly})
	}
	res := corev1.ResourceList{}
	if m := limits.Of(o.Memory, DefaultMemory); m > 0 {
		res[corev1.ResourceMemory] = *resource.NewQuantity(m, resource.BinarySI)
	}
	if c := limits.Of(o.MilliCPU, DefaultMilliCPU); c > 0 {
		res[corev1.ResourceCPU] = *resource.NewMilliQuantity(c, resource.DecimalSI)
	}
	pull := cmp.Or(o.PullPolicy, corev1.PullNever)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: &grace,
			ShareProcessNamespace:         &no,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser:          &uid,
				RunAsGroup:         &gid,
				RunAsNonRoot:       &yes,
				SupplementalGroups: []int64{},
				SeccompProfile:     &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Volumes: volumes,
			Containers: []corev1.Container{{
				Name:            Container,
				Image:           t.image,
				ImagePullPolicy: pull,
				Command:         []string{python, "-I", "-S", "-c", initProgram, strconv.Itoa(initIdle), strconv.Itoa(initFirst)},
				WorkingDir:      "/tmp",
				// The exec's interpreter is found with this PATH; the kernel's own
				// environment comes in its start block, never here (a pod's spec is
				// readable by whoever may read pods).
				Env: []corev1.EnvVar{
					{Name: "PATH", Value: kernelstart.DefaultPath},
					{Name: "HOME", Value: "/tmp"},
					{Name: "LANG", Value: "C.UTF-8"},
				},
				Resources:    corev1.ResourceRequirements{Requests: res, Limits: res},
				VolumeMounts: mounts,
				SecurityContext: &corev1.SecurityContext{
					Privileged:               &no,
					AllowPrivilegeEscalation: &no,
					ReadOnlyRootFilesystem:   &yes,
					RunAsNonRoot:             &yes,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
		},
	}
	if o.Owner != nil {
		pod.OwnerReferences = []metav1.OwnerReference{*o.Owner}
	}
	if o.Node != "" {
		pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{o.Node}}},
			}}},
		}}
	}
	return pod
}

// policy is the NetworkPolicy of pod name: it selects the pod alone and allows it no
// ingress and no egress. It is made before the pod, so the pod never runs without it
// (where the network plugin enforces policies).
func (t *Transport) policy(name, session string) *networkingv1.NetworkPolicy {
	labels, annotations := ownerMeta(t.opts.Controller, session, name)
	var owners []metav1.OwnerReference
	if t.opts.Owner != nil {
		owners = []metav1.OwnerReference{*t.opts.Owner}
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations, OwnerReferences: owners},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelPod: name}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{},
			Egress:      []networkingv1.NetworkPolicyEgressRule{},
		},
	}
}

// podName is a fresh pod name: "kennel-" and 16 hex digits.
func podName(random []byte) string { return fmt.Sprintf("kennel-%x", random) }
