package sessionspec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/kennel-dev/kennel/pathmap"
)

func TestDecodeNamesEveryBadField(t *testing.T) {
	for _, tc := range []struct {
		doc    string
		fields []string // the FieldError fields, in any order
	}{
		{`{}`, []string{""}},
		{`{"python": "python3"}`, []string{""}},
		{`{"docker": {}, "ssh": {"target": "h"}}`, []string{""}},
		{`{"local": {}, "argvPrefix": ["x"]}`, []string{""}},
		{`{"argvPrefix": []}`, []string{"argvPrefix"}},
		{`{"argvPrefix": "docker exec"}`, []string{"argvPrefix"}},
		{`{"argvPrefix": ["bwrap", 7, "--"], "env": ["A", 4]}`, []string{"argvPrefix[1]", "env[1]"}},
		{`{"argvPrefix": [""]}`, []string{"argvPrefix[0]"}},
		{`{"local": {"x": 1}}`, []string{"local.x"}},
		{`{"local": {}, "pathMap": [{"sandbox": "/w", "host": "/h"}], "env": ["A"]}`, []string{"pathMap", "env"}},
		{`{"docker": {"memory": "lots", "cpus": "fast", "pids": -2, "network": "host", "colour": "red"}}`, []string{"docker.memory", "docker.cpus", "docker.pids", "docker.network", "docker.colour"}},
		{`{"docker": {"pids": "many"}}`, []string{"docker.pids"}},
		{`{"docker": {"container": "box", "memory": "2g", "user": "0:0"}}`, []string{"docker.memory", "docker.user"}},
		{`{"docker": {"network": "container:abc"}}`, []string{"docker.network"}},
		{`{"docker": {"user": "10:x"}}`, []string{"docker.user"}},
		{`{"ssh": {}}`, []string{"ssh.target"}},
		{`{"ssh": {"target": "-oProxyCommand=x"}}`, []string{"ssh.target"}},
		{`{"ssh": {"target": "h", "dir": "rel"}, "env": ["A"]}`, []string{"ssh.dir", "env"}},
		{`{"argvPrefix": ["x"], "pathMap": [{"sandbox": "w", "host": "/h"}, {"sandbox": "/w", "host": "/h", "extra": 1}], "env": ["1A"]}`, []string{"pathMap[0].sandbox", "pathMap[1].extra", "env[0]"}},
		{`{"argvPrefix": ["x"], "pathMap": [{"sandbox": "/w", "host": "/h", "readOnly": "yes"}, "not a mount"]}`, []string{"pathMap[0].readOnly", "pathMap[1]"}},
		{`{"argvPrefix": ["x"], "python": "-c"}`, []string{"python"}},
		{`{"argvPrefix": ["x"], "wrapper": ["y"]}`, []string{"wrapper"}},
		{`{"containerd": {}, "docker": {}}`, []string{""}},
		{`{"containerd": {}, "ssh": {"target": "h"}, "local": {}}`, []string{""}},
		{`{"containerd": {"network": "bridge", "user": "kennel", "memory": "lots", "cpus": "0", "pids": -3, "address": "rel.sock", "namespace": "k8s.io"}}`, []string{"containerd.network", "containerd.user", "containerd.memory", "containerd.pids", "containerd.address", "containerd.namespace"}},
		{`{"containerd": {"runtime": "io.containerd runsc", "image": " img", "cpus": "fast", "user": "1:x"}}`, []string{"containerd.runtime", "containerd.image", "containerd.cpus", "containerd.user"}},
		{`{"containerd": {"network": " none"}, "env": ["1A"]}`, []string{"containerd.network", "env[0]"}},
		{`{"containerd": {"runtime": "/tmp/evil"}}`, []string{"containerd.runtime"}},
		{`{"containerd": {"runtime": "../runsc"}}`, []string{"containerd.runtime"}},
		{`{"containerd": "yes"}`, []string{"containerd"}},
		{`{"kubernetes": {}, "docker": {}}`, []string{""}},
		{`{"kubernetes": {"kubeconfig": "rel/config", "namespace": "Kennel_NS", "node": "-bad", "network": "host", "memory": "lots", "cpus": "fast", "user": "0:0", "colour": 1}}`, []string{"kubernetes.kubeconfig", "kubernetes.namespace", "kubernetes.node", "kubernetes.network", "kubernetes.memory", "kubernetes.cpus", "kubernetes.user", "kubernetes.colour"}},
		{`{"kubernetes": {"user": "kennel", "image": " img"}}`, []string{"kubernetes.user", "kubernetes.image"}},
		{`{"kubernetes": {}, "pathMap": [{"sandbox": "/work", "host": "/tmp"}]}`, []string{"kubernetes.node"}},
		{`[1]`, []string{""}},
		{`null`, []string{""}},
	} {
		got, err := Decode([]byte(tc.doc))
		if err == nil || got != nil {
			t.Errorf("%s: decoded to %+v, %v; want a refusal", tc.doc, got, err)
			continue
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v is not ErrInvalid", tc.doc, err)
		}
		var fields []string
		for _, e := range unjoin(err) {
			var fe *FieldError
			if !errors.As(e, &fe) {
				t.Errorf("%s: %v is not a FieldError", tc.doc, e)
				continue
			}
			fields = append(fields, fe.Field)
		}
		if !sameSet(fields, tc.fields) {
			t.Errorf("%s: fields %q, want %q (%v)", tc.doc, fields, tc.fields, err)
		}
	}
}

func TestDecodeTakesEachKind(t *testing.T) {
	for doc, kind := range map[string]string{
		`{"local": {}}`:                    KindLocal,
		`{"local": {}, "python": "/p/py"}`: KindLocal,
		`{"argvPrefix": ["bwrap", "--"], "python": "python3", "pathMap": [{"sandbox": "/work", "host": "/tmp", "readOnly": true}], "env": ["LANG"]}`: KindWrapped,
		`{"docker": {}}`: KindDocker,
		`{"docker": {"image": "img:1", "network": "bridge", "memory": "512m", "cpus": "0.5", "pids": -1, "runtime": "runsc", "user": "1000:1000"}}`: KindDocker,
		`{"docker": {"container": "box"}, "pathMap": [{"sandbox": "/work", "host": "/tmp"}]}`:                                                       KindDocker,
		`{"ssh": {"target": "me@host:2222", "dir": "/srv/repo"}}`:                                                                                   KindSSH,
		`{"containerd": {}}`: KindContainerd,
		`{"containerd": {"address": "/tmp/c.sock", "image": "img:1", "runtime": "io.containerd.runsc.v1", "network": "none", "memory": "512m", "cpus": "0.5", "pids": -1, "user": "1000:1000"}, "pathMap": [{"sandbox": "/work", "host": "/tmp"}], "env": ["LANG"]}`: KindContainerd,
		`{"containerd": {"address": "unix:///run/containerd/containerd.sock"}}`: KindContainerd,
		`{"kubernetes": {}}`: KindKubernetes,
		`{"kubernetes": {"kubeconfig": "/etc/k/config", "context": "ci", "namespace": "kennel-test", "image": "img:1", "node": "node-1.example", "network": "cluster", "memory": "512m", "cpus": "0.5", "user": "1000:1000"}, "pathMap": [{"sandbox": "/work", "host": "/tmp"}], "env": ["LANG"]}`: KindKubernetes,
	} {
		tr, err := Decode([]byte(doc))
		if err != nil {
			t.Errorf("%s: %v", doc, err)
			continue
		}
		if k, err := tr.Kind(); k != kind || err != nil {
			t.Errorf("%s: kind %q %v, want %q", doc, k, err, kind)
		}
		// Its JSON decodes to the same description.
		b, _ := json.Marshal(tr)
		again, err := Decode(b)
		if err != nil {
			t.Errorf("%s: re-decoding %s: %v", doc, b, err)
			continue
		}
		if b2, _ := json.Marshal(again); string(b2) != string(b) {
			t.Errorf("%s: round trip %s != %s", doc, b2, b)
		}
	}
	if k, err := (*Transport)(nil).Kind(); k != KindLocal || err != nil {
		t.Fatalf("nil: %q %v", k, err)
	}
}

func TestFieldErrorPointer(t *testing.T) {
	for field, want := range map[string]string{"": "", "docker.memory": "/docker/memory", "pathMap[1].host": "/pathMap/1/host", "env[0]": "/env/0", "a/b~c": "/a~1b~0c"} {
		if got := (&FieldError{Field: field}).Pointer(); got != want {
			t.Errorf("%q: %q, want %q", field, got, want)
		}
	}
}

func TestDockerValues(t *testing.T) {
	d := &Docker{Memory: "2g", CPUs: "1.5", User: "1000:100"}
	if m, err := d.MemoryBytes(); m != 2<<30 || err != nil {
		t.Errorf("memory %d %v", m, err)
	}
	if c, err := d.NanoCPUs(); c != 1_500_000_000 || err != nil {
		t.Errorf("cpus %d %v", c, err)
	}
	if u, g, num, err := d.NumericUser(); u != 1000 || g != 100 || !num || err != nil {
		t.Errorf("user %d %d %v %v", u, g, num, err)
	}
	if _, _, num, err := (&Docker{User: "kennel"}).NumericUser(); num || err != nil {
		t.Errorf("a user name: %v %v", num, err)
	}
	c := &Containerd{Memory: "512m", CPUs: "2"}
	if m, err := c.MemoryBytes(); m != 512<<20 || err != nil {
		t.Errorf("containerd memory %d %v", m, err)
	}
	if n, err := c.NanoCPUs(); n != 2_000_000_000 || err != nil {
		t.Errorf("containerd cpus %d %v", n, err)
	}
	var fe *FieldError
	if _, err := (&Containerd{CPUs: "x"}).NanoCPUs(); !errors.As(err, &fe) || fe.Field != "containerd.cpus" {
		t.Errorf("containerd cpus error %v names %+v", err, fe)
	}
}

// genTransport draws any description: any subset of the kinds, any fields, valid or not.
func genTransport(t *rapid.T) *Transport {
	str := rapid.SampledFrom([]string{"", "x", "/abs", "rel", "-dash", "a=b", "python3", "host", "none", "bridge", "host", "container:c", "2g", "-1", "0", "lots", "0.5", "1000:1000", "0:0", "me@h:22", "a b"})
	tr := &Transport{}
	if rapid.Bool().Draw(t, "local") {
		tr.Local = &Local{}
	}
	if rapid.Bool().Draw(t, "wrapped") {
		tr.ArgvPrefix = rapid.SliceOfN(str, 0, 3).Draw(t, "argv")
	}
	if rapid.Bool().Draw(t, "docker") {
		tr.Docker = &Docker{Image: str.Draw(t, "image"), Container: str.Draw(t, "container"), Network: str.Draw(t, "network"),
			Memory: str.Draw(t, "memory"), CPUs: str.Draw(t, "cpus"), Pids: rapid.Int64Range(-3, 300).Draw(t, "pids"),
			Runtime: str.Draw(t, "runtime"), User: str.Draw(t, "user")}
	}
	if rapid.Bool().Draw(t, "ssh") {
		tr.SSH = &SSH{Target: str.Draw(t, "target"), Dir: str.Draw(t, "dir")}
	}
	if rapid.Bool().Draw(t, "containerd") {
		tr.Containerd = &Containerd{Address: str.Draw(t, "address"), Image: str.Draw(t, "cimage"), Runtime: str.Draw(t, "cruntime"),
			Network: str.Draw(t, "cnetwork"), Memory: str.Draw(t, "cmemory"), CPUs: str.Draw(t, "ccpus"),
			Pids: rapid.Int64Range(-3, 300).Draw(t, "cpids"), User: str.Draw(t, "cuser")}
	}
	tr.Python = str.Draw(t, "python")
	for range rapid.IntRange(0, 2).Draw(t, "mounts") {
		tr.PathMap = append(tr.PathMap, pathmap.Mount{Sandbox: str.Draw(t, "sandbox"), Host: str.Draw(t, "hostpath"), ReadOnly: rapid.Bool().Draw(t, "ro")})
	}
	tr.Env = rapid.SliceOfN(str, 0, 2).Draw(t, "env")
	return tr
}

// TestPropValidNamesExactlyOneKind: every description Validate accepts names exactly one
// kind, is "local" only if it says local, survives its JSON, and lock-down fields of an
// exec-mode or unparsable value are never accepted.
func TestPropValidNamesExactlyOneKind(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tr := genTransport(t)
		err := tr.Validate()
		set := 0
		for _, b := range []bool{tr.Local != nil, tr.ArgvPrefix != nil, tr.Docker != nil, tr.SSH != nil, tr.Containerd != nil, tr.Kubernetes != nil} {
			if b {
				set++
			}
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("refusal %v is not ErrInvalid", err)
			}
			return
		}
		if set != 1 {
			t.Fatalf("accepted a description naming %d kinds: %+v", set, tr)
		}
		kind, _ := tr.Kind()
		if (kind == KindLocal) != (tr.Local != nil) {
			t.Fatalf("kind %s for %+v", kind, tr)
		}
		if tr.Docker != nil {
			if _, err := tr.Docker.MemoryBytes(); err != nil {
				t.Fatalf("accepted memory %q", tr.Docker.Memory)
			}
			if tr.Docker.Container != "" && (tr.Docker.Memory != "" || tr.Docker.User != "" || tr.Docker.Network != "") {
				t.Fatalf("accepted lock-down fields in exec mode: %+v", tr.Docker)
			}
			if n := tr.Docker.Network; n == "host" || strings.HasPrefix(n, "container:") {
				t.Fatalf("accepted network %q", n)
			}
		}
		if c := tr.Containerd; c != nil {
			if c.Network != "" && c.Network != "none" {
				t.Fatalf("accepted containerd network %q", c.Network)
			}
			if _, _, numeric, err := numericUser("containerd.user", c.User); c.User != "" && (!numeric || err != nil) {
				t.Fatalf("accepted containerd user %q", c.User)
			}
			if _, err := c.MemoryBytes(); err != nil {
				t.Fatalf("accepted containerd memory %q", c.Memory)
			}
			if c.Address != "" && !strings.HasPrefix(strings.TrimPrefix(c.Address, "unix://"), "/") {
				t.Fatalf("accepted containerd address %q", c.Address)
			}
		}
		b, _ := json.Marshal(tr)
		again, err := Decode(b)
		if err != nil {
			t.Fatalf("a valid description's JSON %s does not decode: %v", b, err)
		}
		if k2, _ := again.Kind(); k2 != kind {
			t.Fatalf("kind %s became %s through JSON", kind, k2)
		}
	})
}

// FuzzDecode: Decode never panics, and what it accepts validates and round-trips.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{}`, `{"local":{}}`, `{"docker":{"memory":"2g"}}`, `{"ssh":{"target":"h"}}`, `{"containerd":{"runtime":"io.containerd.runsc.v1","user":"1:1"}}`, `{"containerd":{},"docker":{}}`, `{"kubernetes":{"namespace":"ns","user":"1:1"}}`, `{"argvPrefix":["a"],"pathMap":[{"sandbox":"/a","host":"/b"}]}`, `[`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := Decode(data)
		if err != nil {
			if tr != nil {
				t.Fatal("a refused description was returned")
			}
			return
		}
		if err := tr.Validate(); err != nil {
			t.Fatalf("Decode accepted what Validate refuses: %v", err)
		}
		b, _ := json.Marshal(tr)
		if _, err := Decode(b); err != nil {
			t.Fatalf("%s does not decode again: %v", b, err)
		}
	})
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, unjoin(e)...)
		}
		return out
	}
	return []error{err}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]int{}
	for _, x := range a {
		m[x]++
	}
	for _, x := range b {
		m[x]--
	}
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return true
}
