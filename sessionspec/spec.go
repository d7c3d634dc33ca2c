package sessionspec

import (
	"errors"
	"fmt"
	"math"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/docker/go-units"

	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/transports/containerd"
)

// The kinds of transport a Transport can name, as Kind returns them and as each
// transport's Name reports it.
const (
	KindLocal      = "local"
	KindWrapped    = "wrapped"
	KindDocker     = "docker"
	KindSSH        = "ssh"
	KindContainerd = "containerd"
	KindKubernetes = "kubernetes"
)

// Transport describes where a session's kernel runs and how: exactly one of Local,
// ArgvPrefix (a wrapped kernel), Docker, SSH, Containerd and Kubernetes, with the fields
// that kind takes. It is
// the one type the kernelTransport setting, `kennel run`'s and `kennel create`'s flags and
// the API's `transport` all decode into (its JSON is the setting's). The zero value names
// no transport and is refused: a host kernel runs only when the description is absent
// (a nil *Transport) or says Local.
type Transport struct {
	// Local runs the kernel as a host process (transports/local): it sees the host's
	// files and environment. It takes Python only.
	Local *Local `json:"local,omitempty"`
	// ArgvPrefix runs the kernel under this wrapper command (transports/wrapped), e.g.
	// ["bwrap", ..., "--"] or ["docker", "exec", "-i", "box"].
	ArgvPrefix []string `json:"argvPrefix,omitempty"`
	// Docker runs the kernel in a locked-down container (transports/docker).
	Docker *Docker `json:"docker,omitempty"`
	// SSH runs the kernel on a remote host (transports/ssh); its files are the remote
	// host's, served over SFTP.
	SSH *SSH `json:"ssh,omitempty"`
	// Containerd runs the kernel as the task of a locked-down container in a containerd
	// daemon (transports/containerd).
	Containerd *Containerd `json:"containerd,omitempty"`
	// Kubernetes runs the kernel in a locked-down pod of its own, reached by exec through
	// the cluster's API server (transports/kubernetes).
	Kubernetes *Kubernetes `json:"kubernetes,omitempty"`

	// Python is the interpreter inside the sandbox: a name on its PATH or a path. Empty
	// means "python3".
	Python string `json:"python,omitempty"`
	// PathMap lists the shared mounts (wrapped, docker and containerd): each is one directory at its
	// sandbox and its host path. Empty maps the session's directory to itself.
	PathMap []pathmap.Mount `json:"pathMap,omitempty"`
	// Env names host variables the kernel gets (wrapped, docker and containerd), their
	// values mapped
	// through the path map.
	Env []string `json:"env,omitempty"`
}

// Local is the local transport's description. It has no fields of its own.
type Local struct{}

// Docker is the Docker transport's description. Every zero value is the transport's
// locked-down default (transports/docker.Options).
type Docker struct {
	// Image is the kernel image; empty means kennel-kernel:<stub hash>.
	Image string `json:"image,omitempty"`
	// Container selects exec mode: the kernel runs as an exec in this existing
	// container, whose own limits apply; the lock-down fields below must then be unset.
	Container string `json:"container,omitempty"`
	// Network is "none" (default), "bridge" or a named network; "host" and
	// "container:..." are refused (they share the host's or another container's network).
	Network string `json:"network,omitempty"`
	// Memory is the memory limit, e.g. "512m" or "2g"; empty means 1 GiB; "-1" none.
	Memory string `json:"memory,omitempty"`
	// CPUs is the CPU limit, e.g. "0.5" or "2"; empty means 1; "-1" none.
	CPUs string `json:"cpus,omitempty"`
	// Pids limits processes and threads; 0 means 256; -1 none.
	Pids int64 `json:"pids,omitempty"`
	// Runtime is the OCI runtime, e.g. "runsc"; empty means the engine's default.
	Runtime string `json:"runtime,omitempty"`
	// User is the kernel's "uid:gid" (or a user name of the image); empty means the
	// operator's uid:gid, never root.
	User string `json:"user,omitempty"`
}

// Containerd is the containerd transport's description. Every zero value is the
// transport's locked-down default (transports/containerd.Options); its objects live in
// containerd's namespace "kennel", which is not configurable.
type Containerd struct {
	// Address is the daemon's socket (an absolute path); empty means
	// /run/containerd/containerd.sock, the machine's containerd (not Docker's own).
	Address string `json:"address,omitempty"`
	// Image is the kernel image in the kennel namespace; empty means the one `kennel image
	// build --containerd` imports (docker.io/library/kennel-kernel:<stub hash>).
	Image string `json:"image,omitempty"`
	// Runtime is a containerd shim ("io.containerd.<name>.<version>", e.g.
	// "io.containerd.runsc.v1", gVisor's own shim) or an OCI runtime binary the runc shim
	// runs in runc's place ("runsc": gVisor, as Docker's runtime runsc); empty means runc
	// ("io.containerd.runc.v2").
	Runtime string `json:"runtime,omitempty"`
	// Network is "none" (the default: a network namespace with only loopback), the only
	// network the transport gives.
	Network string `json:"network,omitempty"`
	// Memory is the memory limit, e.g. "512m" or "2g"; empty means 1 GiB; "-1" none.
	Memory string `json:"memory,omitempty"`
	// CPUs is the CPU limit, e.g. "0.5" or "2"; empty means 1; "-1" none.
	CPUs string `json:"cpus,omitempty"`
	// Pids limits processes and threads; 0 means 256; -1 none.
	Pids int64 `json:"pids,omitempty"`
	// User is the kernel's numeric "uid:gid" (a user name is refused: resolving it would
	// read the image on the client); empty means the operator's uid:gid, never root.
	User string `json:"user,omitempty"`
}

// Kubernetes is the Kubernetes transport's description. Every zero value is the
// transport's locked-down default (transports/kubernetes.Options).
type Kubernetes struct {
	// Kubeconfig is the kubeconfig file (an absolute path); empty means client-go's
	// rules: the files KUBECONFIG names, else ~/.kube/config, else the in-cluster
	// configuration of a controller that runs in a pod.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// Context is the kubeconfig context; empty means its current one.
	Context string `json:"context,omitempty"`
	// Namespace is where the pods are made; empty means the context's namespace.
	Namespace string `json:"namespace,omitempty"`
	// Image is the kernel image, present on the nodes (pods never pull); empty means the
	// one `kennel image build` makes, as the node's containerd names it
	// (docker.io/library/kennel-kernel:<stub hash>).
	Image string `json:"image,omitempty"`
	// Node pins the pods to this node. With a pathMap it is required and must be the
	// controller's own node: each mount becomes a hostPath volume of that node, and the
	// controller serves fs.* from the same files. Empty leaves the node to the scheduler
	// (and the kernel has no mounts: fs.* answers unavailable).
	Node string `json:"node,omitempty"`
	// Network is "none" (the default: a NetworkPolicy denies the pod's ingress and
	// egress, where the cluster enforces policies) or "cluster" (no policy: the pod has
	// the cluster network's reach).
	Network string `json:"network,omitempty"`
	// Memory is the memory request and limit, e.g. "512m" or "2g"; empty means 1 GiB;
	// "-1" none.
	Memory string `json:"memory,omitempty"`
	// CPUs is the CPU request and limit, e.g. "0.5" or "2"; empty means 1; "-1" none.
	CPUs string `json:"cpus,omitempty"`
	// User is the kernel's numeric "uid:gid" (never root: pods run as non-root); empty
	// means the operator's uid:gid, or for root the owner of the working directory.
	User string `json:"user,omitempty"`
}

func (k *Kubernetes) check() []error {
	var errs []error
	add := firstPerField(&errs)
	for _, f := range []struct{ name, v string }{{"kubeconfig", k.Kubeconfig}, {"context", k.Context}, {"namespace", k.Namespace},
		{"image", k.Image}, {"node", k.Node}, {"network", k.Network}, {"user", k.User}} {
		if strings.IndexByte(f.v, 0) >= 0 || strings.TrimSpace(f.v) != f.v {
			add(bad("kubernetes."+f.name, "%q has a NUL byte or surrounding space", f.v))
		}
	}
	if k.Kubeconfig != "" && !path.IsAbs(k.Kubeconfig) {
		add(bad("kubernetes.kubeconfig", "%q: want an absolute path", k.Kubeconfig))
	}
	if k.Namespace != "" && !dnsLabel.MatchString(k.Namespace) {
		add(bad("kubernetes.namespace", "%q: want a DNS label (lower-case letters, digits and '-', at most 63)", k.Namespace))
	}
	if k.Node != "" && (len(k.Node) > 253 || !dnsSubdomain.MatchString(k.Node)) {
		add(bad("kubernetes.node", "%q: want a node name (a DNS subdomain)", k.Node))
	}
	if k.Network != "" && k.Network != "none" && k.Network != "cluster" {
		add(bad("kubernetes.network", "%q: want none (the default) or cluster", k.Network))
	}
	if _, err := k.MemoryBytes(); err != nil {
		add(err)
	}
	if _, err := k.NanoCPUs(); err != nil {
		add(err)
	}
	if k.User != "" {
		if uid, _, numeric, err := numericUser("kubernetes.user", k.User); !numeric {
			add(bad("kubernetes.user", "%q: want a numeric uid:gid", k.User))
		} else if err != nil {
			add(err)
		} else if uid == 0 {
			add(bad("kubernetes.user", "%q: pods run as non-root (runAsNonRoot): uid 0 is refused", k.User))
		}
	}
	return errs
}

// firstPerField returns the add of a kind's check: it keeps one error a field in *errs,
// the first found, which says what is wrong with it.
func firstPerField(errs *[]error) func(error) {
	named := map[string]bool{}
	return func(e error) {
		if fe, ok := e.(*FieldError); ok && !named[fe.Field] {
			named[fe.Field] = true
			*errs = append(*errs, e)
		}
	}
}

// MemoryBytes is Memory in bytes: 0 for the default, -1 for none.
func (k *Kubernetes) MemoryBytes() (int64, error) { return memoryBytes("kubernetes.memory", k.Memory) }

// NanoCPUs is CPUs in billionths of a CPU: 0 for the default, -1 for none.
func (k *Kubernetes) NanoCPUs() (int64, error) { return nanoCPUs("kubernetes.cpus", k.CPUs) }

var (
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// SSH is the ssh transport's description.
type SSH struct {
	// Target is the host: "[user@]host[:port]", resolved through the ssh config.
	// Required.
	Target string `json:"target"`
	// Dir is the session's working directory on the remote host (absolute); empty means
	// the remote login user's home.
	Dir string `json:"dir,omitempty"`
}

// ErrInvalid is the class of every refusal of a description (errors.Is; it is
// errdefs.ErrInvalidArgument, so a daemon answers 400).
var ErrInvalid = errdefs.ErrInvalidArgument

// FieldError names one bad field of a description by its JSON path ("docker.memory",
// "pathMap[1].host", "" for the description as a whole) and says what is wrong.
type FieldError struct {
	Field string
	// Unknown reports a field no description has (a misspelling, say), as opposed to a
	// known field with a bad value.
	Unknown bool
	Err     error
}

// Pointer is Field as a JSON pointer ("/docker/memory", "/pathMap/1/host", "").
func (e *FieldError) Pointer() string {
	var b strings.Builder
	for _, part := range strings.FieldsFunc(e.Field, func(r rune) bool { return r == '.' || r == '[' }) {
		part = strings.TrimSuffix(part, "]")
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(part))
	}
	return b.String()
}

// Error reads "kernel transport FIELD: REASON".
func (e *FieldError) Error() string {
	if e.Field == "" {
		return "kernel transport: " + e.Err.Error()
	}
	return "kernel transport " + e.Field + ": " + e.Err.Error()
}

// Unwrap returns the reason; Is matches ErrInvalid too.
func (e *FieldError) Unwrap() error { return e.Err }

// Is reports target == ErrInvalid: every FieldError is a refusal of the description.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

func bad(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

// Kind returns the kind the description names (KindLocal for a nil one), or a
// FieldError when it names none or several.
func (t *Transport) Kind() (string, error) {
	if t == nil {
		return KindLocal, nil
	}
	var kinds []string
	for _, k := range []struct {
		kind string
		set  bool
	}{{KindLocal, t.Local != nil}, {KindWrapped, t.ArgvPrefix != nil}, {KindDocker, t.Docker != nil},
		{KindSSH, t.SSH != nil}, {KindContainerd, t.Containerd != nil}, {KindKubernetes, t.Kubernetes != nil}} {
		if k.set {
			kinds = append(kinds, k.kind)
		}
	}
	switch len(kinds) {
	case 1:
		return kinds[0], nil
	case 0:
		return "", bad("", "names no transport: set one of local, argvPrefix, docker, ssh, containerd, kubernetes")
	}
	// Named as a description names them: the wrapped kind is argvPrefix.
	names := strings.Replace(strings.Join(kinds, ", "), KindWrapped, "argvPrefix", 1)
	return "", bad("", "names %d transports (%s): set exactly one", len(kinds), names)
}

// Validate returns nil when the description can start exactly the transport it names, and
// otherwise every bad field joined, each a *FieldError (errors.Is ErrInvalid). It checks
// form only; whether the wrapper, image or host exists is the assembly's to find out.
func (t *Transport) Validate() error {
	if t == nil {
		return nil
	}
	var errs []error
	add := func(e *FieldError) {
		if e != nil {
			errs = append(errs, e)
		}
	}
	kind, kerr := t.Kind()
	if kerr != nil {
		errs = append(errs, kerr)
	}
	if t.Python != "" {
		add(checkPython(t.Python))
	}
	for i, m := range t.PathMap {
		f := fmt.Sprintf("pathMap[%d]", i)
		for _, p := range []struct{ name, v string }{{"sandbox", m.Sandbox}, {"host", m.Host}} {
			if !path.IsAbs(p.v) || strings.IndexByte(p.v, 0) >= 0 {
				add(bad(f+"."+p.name, "%q is not an absolute path", p.v))
			}
		}
	}
	for i, name := range t.Env {
		if !envName.MatchString(name) {
			add(bad(fmt.Sprintf("env[%d]", i), "%q is not a variable name", name))
		}
	}
	// Each kind's own fields are checked whatever the kind error: every bad field is
	// named at once.
	if t.ArgvPrefix != nil {
		errs = append(errs, checkArgv(t.ArgvPrefix)...)
	}
	if t.Docker != nil {
		errs = append(errs, t.Docker.check()...)
	}
	if t.SSH != nil {
		errs = append(errs, t.SSH.check()...)
	}
	if t.Containerd != nil {
		errs = append(errs, t.Containerd.check()...)
	}
	if t.Kubernetes != nil {
		errs = append(errs, t.Kubernetes.check()...)
	}
	switch kind {
	case KindLocal:
		if len(t.PathMap) > 0 {
			add(bad("pathMap", "a local kernel sees the host's files: pathMap goes with argvPrefix, docker or containerd"))
		}
		if len(t.Env) > 0 {
			add(bad("env", "a local kernel has the host's environment: env goes with argvPrefix, docker or containerd"))
		}
	case KindSSH:
		if len(t.PathMap) > 0 {
			add(bad("pathMap", "a remote kernel's files are its host's: pathMap does not apply over ssh (set ssh.dir)"))
		}
		if len(t.Env) > 0 {
			add(bad("env", "a remote kernel's environment is its host's: env does not apply over ssh"))
		}
	case KindKubernetes:
		if len(t.PathMap) > 0 && t.Kubernetes.Node == "" {
			add(bad("kubernetes.node", "a pathMap's mounts are hostPath volumes of one node: name it (the controller's own) with kubernetes.node"))
		}
	}
	return errors.Join(errs...)
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func checkPython(p string) *FieldError {
	if strings.IndexByte(p, 0) >= 0 || strings.HasPrefix(p, "-") || strings.Contains(p, "=") || strings.TrimSpace(p) != p {
		return bad("python", "%q is not an interpreter name or path", p)
	}
	return nil
}

func checkArgv(argv []string) []error {
	if len(argv) == 0 {
		return []error{bad("argvPrefix", "is empty: a wrapper command is required")}
	}
	var errs []error
	if argv[0] == "" {
		errs = append(errs, bad("argvPrefix[0]", "the wrapper command is empty"))
	}
	for i, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			errs = append(errs, bad(fmt.Sprintf("argvPrefix[%d]", i), "has a NUL byte"))
		}
	}
	return errs
}

func (d *Docker) check() []error {
	var errs []error
	add := func(e *FieldError) {
		if e != nil {
			errs = append(errs, e)
		}
	}
	for _, f := range []struct{ name, v string }{{"image", d.Image}, {"container", d.Container}, {"runtime", d.Runtime}, {"user", d.User}, {"network", d.Network}} {
		if strings.IndexByte(f.v, 0) >= 0 || strings.TrimSpace(f.v) != f.v {
			add(bad("docker."+f.name, "%q has a NUL byte or surrounding space", f.v))
		}
	}
	if d.Container != "" {
		// Exec mode: the container's own limits apply; a lock-down field set here would
		// silently not be, so it is refused.
		for _, f := range []struct {
			name string
			set  bool
		}{{"image", d.Image != ""}, {"network", d.Network != ""}, {"memory", d.Memory != ""}, {"cpus", d.CPUs != ""}, {"pids", d.Pids != 0}, {"runtime", d.Runtime != ""}, {"user", d.User != ""}} {
			if f.set {
				add(bad("docker."+f.name, "does not apply in exec mode (docker.container is set): the container's own settings do"))
			}
		}
		return errs
	}
	switch n := d.Network; {
	case n == "host" || strings.HasPrefix(n, "container:"):
		add(bad("docker.network", "%q shares a network namespace with the host or another container: use none, bridge or a named network", n))
	}
	if _, err := d.MemoryBytes(); err != nil {
		add(err.(*FieldError))
	}
	if _, err := d.NanoCPUs(); err != nil {
		add(err.(*FieldError))
	}
	if d.Pids < -1 {
		add(bad("docker.pids", "%d: want a positive number, 0 for the default or -1 for none", d.Pids))
	}
	if d.User != "" {
		if _, _, numeric, err := d.NumericUser(); numeric && err != nil {
			add(err.(*FieldError))
		}
	}
	return errs
}

// MemoryBytes is Memory in bytes: 0 for the default, -1 for none.
func (d *Docker) MemoryBytes() (int64, error) { return memoryBytes("docker.memory", d.Memory) }

// NanoCPUs is CPUs in billionths of a CPU: 0 for the default, -1 for none.
func (d *Docker) NanoCPUs() (int64, error) { return nanoCPUs("docker.cpus", d.CPUs) }

func memoryBytes(field, m string) (int64, error) {
	switch m {
	case "", "0":
		return 0, nil
	case "-1":
		return -1, nil
	default:
		v, err := units.RAMInBytes(m)
		if err != nil || v <= 0 {
			return 0, bad(field, "%q: want a size such as 512m or 2g, or -1 for none", m)
		}
		return v, nil
	}
}

func nanoCPUs(field, c string) (int64, error) {
	switch c {
	case "", "0":
		return 0, nil
	case "-1":
		return -1, nil
	default:
		v, err := strconv.ParseFloat(c, 64)
		if err != nil || v <= 0 || v > 1024 || math.IsNaN(v) {
			return 0, bad(field, "%q: want a positive number such as 0.5 or 2, or -1 for none", c)
		}
		return int64(v * 1e9), nil
	}
}

// NumericUser parses User when it is numeric ("uid:gid"): numeric reports whether it
// is (a user name of the image is not, and is no error).
func (d *Docker) NumericUser() (uid, gid int, numeric bool, err error) {
	return numericUser("docker.user", d.User)
}

func numericUser(field, user string) (uid, gid int, numeric bool, err error) {
	u, g, ok := strings.Cut(user, ":")
	if _, e := strconv.Atoi(u); e != nil {
		return 0, 0, false, nil
	}
	numeric = true
	if !ok {
		return 0, 0, true, bad(field, "%q: want uid:gid", user)
	}
	uid, e1 := strconv.Atoi(u)
	gid, e2 := strconv.Atoi(g)
	if e1 != nil || e2 != nil || uid < 0 || gid < 0 || uid > math.MaxInt32 || gid > math.MaxInt32 {
		return 0, 0, true, bad(field, "%q: want uid:gid, two numbers", user)
	}
	return uid, gid, true, nil
}

func (c *Containerd) check() []error {
	var errs []error
	add := firstPerField(&errs)
	for _, f := range []struct{ name, v string }{{"address", c.Address}, {"image", c.Image}, {"user", c.User}, {"network", c.Network}} {
		if strings.IndexByte(f.v, 0) >= 0 || strings.TrimSpace(f.v) != f.v {
			add(bad("containerd."+f.name, "%q has a NUL byte or surrounding space", f.v))
		}
	}
	if a := strings.TrimPrefix(c.Address, "unix://"); c.Address != "" && !path.IsAbs(a) {
		add(bad("containerd.address", "%q: want the daemon's socket, an absolute path", c.Address))
	}
	if c.Network != "" && c.Network != "none" {
		add(bad("containerd.network", "%q: the containerd transport gives only loopback: none (the default)", c.Network))
	}
	if err := containerd.CheckRuntime(c.Runtime); err != nil {
		add(bad("containerd.runtime", "%v", err))
	}
	if _, err := c.MemoryBytes(); err != nil {
		add(err)
	}
	if _, err := c.NanoCPUs(); err != nil {
		add(err)
	}
	if c.Pids < -1 {
		add(bad("containerd.pids", "%d: want a positive number, 0 for the default or -1 for none", c.Pids))
	}
	if c.User != "" {
		if _, _, numeric, err := numericUser("containerd.user", c.User); !numeric {
			add(bad("containerd.user", "%q: want a numeric uid:gid (a user name would be read from the image on the client)", c.User))
		} else if err != nil {
			add(err)
		}
	}
	return errs
}

// MemoryBytes is Memory in bytes: 0 for the default, -1 for none.
func (c *Containerd) MemoryBytes() (int64, error) { return memoryBytes("containerd.memory", c.Memory) }

// NanoCPUs is CPUs in billionths of a CPU: 0 for the default, -1 for none.
func (c *Containerd) NanoCPUs() (int64, error) { return nanoCPUs("containerd.cpus", c.CPUs) }

func (s *SSH) check() []error {
	var errs []error
	t := s.Target
	switch {
	case t == "":
		errs = append(errs, bad("ssh.target", "is required: [user@]host[:port]"))
	case strings.HasPrefix(t, "-") || strings.ContainsAny(t, " \t\r\n\x00/"):
		errs = append(errs, bad("ssh.target", "%q is not [user@]host[:port]", t))
	}
	if s.Dir != "" && (!path.IsAbs(s.Dir) || strings.IndexByte(s.Dir, 0) >= 0) {
		errs = append(errs, bad("ssh.dir", "%q is not an absolute path", s.Dir))
	}
	return errs
}
