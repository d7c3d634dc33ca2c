package kubernetes

import (
	"errors"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"

	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
)

var testOwner = docker.Controller{Host: "host-a", Boot: "0f8b7f2e-8d5c-4f7e-9a51-1d2b3c4d5e6f", PID: 4242, Start: 987654}

func testTransport(t *testing.T, o Options) *Transport {
	t.Helper()
	cli, err := NewClient(&rest.Config{Host: "https://127.0.0.1:1"}, "ns")
	if err != nil {
		t.Fatal(err)
	}
	if o.Controller.IsZero() {
		o.Controller = testOwner
	}
	tr, err := New(cli, o)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// Labels are valid label values whatever the session id; the owner reads back from the
// annotations only when they are whole and match the controller label.
func TestOwnerMetaRoundTrip(t *testing.T) {
	for _, session := range []string{"s1", "a session/with spaces", strings.Repeat("x", 100), "-leading"} {
		labels, ann := ownerMeta(testOwner, session, "kennel-0011223344556677")
		for k, v := range labels {
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				t.Errorf("session %q: label %s=%q: %v", session, k, v, errs)
			}
			if errs := validation.IsQualifiedName(k); len(errs) > 0 {
				t.Errorf("label key %q: %v", k, errs)
			}
		}
		if ann[AnnotationSession] != session {
			t.Errorf("session annotation %q, want %q", ann[AnnotationSession], session)
		}
		got, ok := ownerOf(labels, ann)
		if !ok || got != testOwner {
			t.Errorf("owner read back %+v, %v", got, ok)
		}
		labels[LabelController] = "other"
		if _, ok := ownerOf(labels, ann); ok {
			t.Errorf("an owner whose label is another controller's was read back")
		}
	}
}

// The sweep's rule: Self's own objects go unless Keep keeps their session; another
// host's are kept; a detached pod is kept while it runs unless Held says no record holds
// it, and removed once it has ended.
func TestSweepRule(t *testing.T) {
	self := testOwner
	labels, ann := ownerMeta(self, "s1", "p")
	o := SweepOptions{Self: self}
	if !sweepable(labels, ann, o) {
		t.Errorf("Self's object without Keep: kept")
	}
	o.Keep = func(s string) bool { return s == "s1" }
	if sweepable(labels, ann, o) {
		t.Errorf("Self's object Keep keeps: swept")
	}
	other := self
	other.Host = "host-b"
	ol, oa := ownerMeta(other, "s1", "p")
	if sweepable(ol, oa, SweepOptions{Self: self}) {
		t.Errorf("another host's object: swept")
	}
	if sweepable(map[string]string{LabelKennel: "1"}, nil, SweepOptions{Self: self}) {
		t.Errorf("an object without owner annotations: swept")
	}
	p := &corev1.Pod{}
	p.Labels, p.Annotations = ownerMeta(self, "s1", "p")
	p.Labels[LabelDetached] = "1"
	p.Status.Phase = corev1.PodRunning
	if sweepablePod(p, SweepOptions{Self: self}) {
		t.Errorf("a running detached pod with no Held: swept")
	}
	if !sweepablePod(p, SweepOptions{Self: self, Held: func(string) bool { return false }}) {
		t.Errorf("a running detached pod of Self no record holds: kept")
	}
	if sweepablePod(p, SweepOptions{Self: self, Held: func(string) bool { return true }}) {
		t.Errorf("a held detached pod: swept")
	}
	p.Status.Phase = corev1.PodSucceeded
	if !sweepablePod(p, SweepOptions{Self: self, Keep: func(string) bool { return true }}) {
		t.Errorf("an ended detached pod: kept")
	}
}

// Options that cannot work are refused before anything runs, naming the field.
func TestOptionsRefused(t *testing.T) {
	cli, err := NewClient(&rest.Config{Host: "https://127.0.0.1:1"}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, field string
		o           Options
	}{
		{"root user", "Options.User", Options{User: "0:0"}},
		{"user name", "Options.User", Options{User: "kennel"}},
		{"mounts without node", "Options.Node", Options{Mounts: []pathmap.Mount{{Sandbox: "/w", Host: "/h"}}}},
		{"relative mount", "Options.Mounts[0]", Options{Node: "n", Mounts: []pathmap.Mount{{Sandbox: "w", Host: "/h"}}}},
		{"mount at /tmp", "Options.Mounts[0]", Options{Node: "n", Mounts: []pathmap.Mount{{Sandbox: "/tmp", Host: "/h"}}}},
		{"two mounts at one path", "Options.Claims[0]", Options{Node: "n", Mounts: []pathmap.Mount{{Sandbox: "/w", Host: "/h"}}, Claims: []Claim{{Name: "c", Sandbox: "/w/"}}}},
		{"bad claim", "Options.Claims[0]", Options{Claims: []Claim{{Name: "Not_A_Name", Sandbox: "/c"}}}},
		{"bad namespace", "Options.Namespace", Options{Namespace: "Kennel Test"}},
		{"bad pull policy", "Options.PullPolicy", Options{PullPolicy: "Sometimes"}},
		{"mount over the run root", "Options.Mounts[0]", Options{Detached: true, Node: "n", Mounts: []pathmap.Mount{{Sandbox: "/run", Host: "/h"}}}},
	} {
		_, err := New(cli, c.o)
		var fe *transports.FieldError
		if !errdefs.IsInvalidArgument(err) || !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: %v, want an invalid argument naming %s", c.name, err, c.field)
		}
	}
}

// The pod spec holds the whole lock-down, and the kernel's environment is not in it.
func TestPodSpecLockdown(t *testing.T) {
	tr := testTransport(t, Options{Node: "n1", Mounts: []pathmap.Mount{{Sandbox: "/work", Host: "/srv/w", ReadOnly: true}}, Claims: []Claim{{Name: "data", Sandbox: "/data"}}})
	p := tr.podSpec("kennel-00", "s1", "python3", 4321, 4322)
	s, c := p.Spec, p.Spec.Containers[0]
	checks := map[string]bool{
		"runAsNonRoot uid gid":    *s.SecurityContext.RunAsNonRoot && *s.SecurityContext.RunAsUser == 4321 && *s.SecurityContext.RunAsGroup == 4322,
		"no supplementary groups": len(s.SecurityContext.SupplementalGroups) == 0,
		"seccomp RuntimeDefault":  s.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault,
		"no token":                !*s.AutomountServiceAccountToken,
		"no service links":        !*s.EnableServiceLinks,
		"never restarts":          s.RestartPolicy == corev1.RestartPolicyNever,
		"no host namespaces":      !s.HostNetwork && !s.HostPID && !s.HostIPC,
		"read-only root":          *c.SecurityContext.ReadOnlyRootFilesystem,
		"drop ALL":                len(c.SecurityContext.Capabilities.Drop) == 1 && c.SecurityContext.Capabilities.Drop[0] == "ALL",
		"no escalation":           !*c.SecurityContext.AllowPrivilegeEscalation && !*c.SecurityContext.Privileged,
		"requests = limits":       c.Resources.Requests.Memory().Equal(*c.Resources.Limits.Memory()) && c.Resources.Requests.Cpu().Equal(*c.Resources.Limits.Cpu()),
		"1 GiB, 1 CPU":            c.Resources.Limits.Memory().Value() == DefaultMemory && c.Resources.Limits.Cpu().MilliValue() == DefaultMilliCPU,
		"never pulled":            c.ImagePullPolicy == corev1.PullNever,
		"pinned to its node":      s.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values[0] == "n1",
	}
	for name, ok := range checks {
		if !ok {
			t.Errorf("pod spec: %s does not hold", name)
		}
	}
	var tmp, host, claim bool
	for _, v := range s.Volumes {
		switch {
		case v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumMemory && v.EmptyDir.SizeLimit.Value() == DefaultTmpSize:
			tmp = true
		case v.HostPath != nil && v.HostPath.Path == "/srv/w" && *v.HostPath.Type == corev1.HostPathDirectory:
			host = true
		case v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "data":
			claim = true
		}
	}
	if !tmp || !host || !claim {
		t.Errorf("volumes %+v: want a memory emptyDir for /tmp, the hostPath, the claim", s.Volumes)
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/work" && !m.ReadOnly {
			t.Errorf("a read-only mount is mounted read-write")
		}
	}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "KENNEL_") {
			t.Errorf("the pod's spec holds %s: the kernel's environment belongs in its start block", e.Name)
		}
	}
	np := tr.policy("kennel-00", "s1")
	if np.Spec.PodSelector.MatchLabels[LabelPod] != "kennel-00" || p.Labels[LabelPod] != "kennel-00" || len(np.Spec.Ingress)+len(np.Spec.Egress) != 0 || len(np.Spec.PolicyTypes) != 2 {
		t.Errorf("policy %+v does not deny the pod everything", np.Spec)
	}
	if err := tr.opts.HostFiles(); !errors.Is(err, transports.ErrUnavailable) || !strings.Contains(err.Error(), "data at /data") {
		t.Errorf("HostFiles with a claim the controller lacks: %v", err)
	}
	if ms := tr.opts.PathMounts(); len(ms) != 1 || ms[0].Host != "/srv/w" {
		t.Errorf("path mounts %+v: want the hostPath alone", ms)
	}
}

// A session id that is no label value still selects by its hashed label.
func TestLabelValue(t *testing.T) {
	if got := labelValue("ok-1"); got != "ok-1" {
		t.Errorf("labelValue(ok-1) = %q", got)
	}
	if a, b := labelValue("a b"), labelValue("a c"); a == b || len(a) != 41 || a[0] != 'h' {
		t.Errorf("hashed labels %q, %q", a, b)
	}
}
