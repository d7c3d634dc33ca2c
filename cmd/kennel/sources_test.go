package main

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/launch"
	"github.com/kennel-dev/kennel/sessionspec"
)

// TestEachSourceOfATransportGivesOneSession is issue 14's table: a description given as
// the kernelTransport setting, as kennel run's flags and as the API's transport decodes to
// the same sessionspec.Transport, and (for the kinds that need no engine or host here)
// assembles to the same session; every invalid one is refused by each source with the
// bad field named.
func TestEachSourceOfATransportGivesOneSession(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		json  string         // the setting's and the API's form
		flags transportFlags // kennel run's
		build bool           // assemble it here
	}{
		{"local", `{"local": {}}`, transportFlags{local: true}, true},
		{"wrapped", `{"argvPrefix": ["setsid", "-w", "--"]}`, transportFlags{argv: `["setsid", "-w", "--"]`}, true},
		{"docker", `{"docker": {"memory": "2g", "network": "bridge", "pids": -1}}`,
			transportFlags{docker: true, dockerFields: sessionspec.Docker{Memory: "2g", Network: "bridge", Pids: -1}}, false},
		{"docker exec", `{"docker": {"container": "box"}}`, transportFlags{docker: true, dockerFields: sessionspec.Docker{Container: "box"}}, false},
		{"ssh", `{"ssh": {"target": "me@build:2222", "dir": "/srv/repo"}}`, transportFlags{ssh: "me@build:2222"}, false},
		{"kubernetes", `{"kubernetes": {"kubeconfig": "/etc/k/config", "context": "ci", "namespace": "kennel", "node": "n1", "image": "img:1", "network": "cluster", "memory": "2g", "cpus": "0.5", "user": "1000:1000"}}`,
			transportFlags{kubernetes: true, kube: sessionspec.Kubernetes{Kubeconfig: "/etc/k/config", Context: "ci", Namespace: "kennel", Node: "n1"},
				dockerFields: sessionspec.Docker{Image: "img:1", Network: "cluster", Memory: "2g", CPUs: "0.5", User: "1000:1000"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fromSetting := settingSpec(t, tc.json)
			remoteDir := ""
			if tc.flags.ssh != "" {
				remoteDir = "/srv/repo"
			}
			fromFlags, err := tc.flags.spec(nil, remoteDir)
			if err != nil {
				t.Fatal(err)
			}
			var req api.CreateSession
			if err := json.Unmarshal([]byte(`{"cwd": "/x", "transport": `+tc.json+`}`), &req); err != nil {
				t.Fatal(err)
			}
			for name, got := range map[string]*sessionspec.Transport{"flags": fromFlags, "API": req.Transport} {
				if !reflect.DeepEqual(got, fromSetting) {
					t.Errorf("from %s: %+v; from the setting: %+v", name, got, fromSetting)
				}
			}
			if !tc.build {
				return
			}
			kit := launch.New(launch.Options{})
			defer kit.Close()
			var parts []*launch.Parts
			for _, spec := range []*sessionspec.Transport{fromSetting, fromFlags, req.Transport} {
				p, err := kit.Assemble(context.Background(), spec, dir)
				if err != nil {
					t.Fatal(err)
				}
				defer p.Release()
				parts = append(parts, p)
			}
			for _, p := range parts[1:] {
				if p.Kind != parts[0].Kind || p.SandboxDir != parts[0].SandboxDir || p.Transport.Name() != parts[0].Transport.Name() ||
					!reflect.DeepEqual(p.Env, parts[0].Env) || p.Python != parts[0].Python {
					t.Errorf("assembled %+v, from the setting %+v", p, parts[0])
				}
			}
		})
	}
	// Invalid descriptions: the setting and the API refuse each with its field named (the
	// flags cannot express them: their own mistakes are usage errors).
	for doc, field := range map[string]string{
		`{"docker": {"memory": "lots"}}`:                                         "docker.memory",
		`{"docker": {"network": "host"}}`:                                        "docker.network",
		`{"docker": {"container": "box", "user": "0:0"}}`:                        "docker.user",
		`{"ssh": {"target": "-oProxyCommand=sh"}}`:                               "ssh.target",
		`{"argvPrefix": ["env"], "pathMap": [{"sandbox": "rel", "host": "/h"}]}`: "pathMap[0].sandbox",
		`{"local": {}, "argvPrefix": ["env"]}`:                                   "names 2 transports",
		`{"argvPrefix": ["env"], "docekr": {}}`:                                  "docekr",
		`{"kubernetes": {"user": "0:0"}}`:                                        "kubernetes.user",
		`{"kubernetes": {}, "pathMap": [{"sandbox": "/w", "host": "/h"}]}`:       "kubernetes.node",
	} {
		var req api.CreateSession
		err := json.Unmarshal([]byte(`{"cwd": "/x", "transport": `+doc+`}`), &req)
		if err == nil || !errors.Is(err, sessionspec.ErrInvalid) || !strings.Contains(err.Error(), field) {
			t.Errorf("API %s: %v; want a refusal naming %s", doc, err, field)
		}
		global := filepath.Join(t.TempDir(), "config")
		t.Setenv("KENNEL_CONFIG_DIR", global)
		setTransport(t, global, doc)
		_, _, err = transportFlags{}.resolve(dir, "")
		if err == nil || !strings.Contains(err.Error(), "kernel transport") {
			t.Errorf("setting %s: %v; want a refusal", doc, err)
		}
	}
	// A flag that is not a description is a usage error.
	for _, f := range []transportFlags{{local: true, docker: true}, {dockerFields: sessionspec.Docker{Memory: "2g"}}, {argv: `'open`},
		{kubernetes: true, docker: true}, {kube: sessionspec.Kubernetes{Namespace: "ns"}}, {kubernetes: true, dockerFields: sessionspec.Docker{Pids: 5}}} {
		_, err := f.spec(nil, "")
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 {
			t.Errorf("flags %+v: %v, want exit 2", f, err)
		}
	}
}

// settingSpec is the description the global setting {"kernelTransport": doc} gives.
func settingSpec(t *testing.T, doc string) *sessionspec.Transport {
	t.Helper()
	global := filepath.Join(t.TempDir(), "config")
	t.Setenv("KENNEL_CONFIG_DIR", global)
	setTransport(t, global, doc)
	spec, _, err := launch.FromSettings("")
	if err != nil {
		t.Fatal(err)
	}
	return spec
}
