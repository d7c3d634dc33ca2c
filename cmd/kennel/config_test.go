package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kennel-dev/kennel/launch"
	"github.com/kennel-dev/kennel/settings"
	"github.com/kennel-dev/kennel/transports/wrapped"
)

// runConfig runs `kennel config ARGS...` and returns stdout, stderr and the error.
func runConfig(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	cmd := newConfigCmd()
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

func configDirs(t *testing.T) (global, project string) {
	t.Helper()
	global = filepath.Join(t.TempDir(), "config")
	project = t.TempDir()
	t.Setenv(settings.EnvConfigDir, global)
	return global, project
}

func TestConfigSetGetPath(t *testing.T) {
	global, project := configDirs(t)
	if _, _, err := runConfig(t, "set", "logLevel", "debug"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runConfig(t, "set", "kernelTransport", `{"argvPrefix": ["docker", "exec", "-i", "box"]}`); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runConfig(t, "set", "kernelTransport.python", "/opt/venv/bin/python"); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runConfig(t, "get", "kernelTransport.python", "--project", project)
	if err != nil || strings.TrimSpace(out) != `"/opt/venv/bin/python"` || !strings.Contains(errOut, filepath.Join(global, "settings.json")) {
		t.Errorf("get: %q, %q, %v", out, errOut, err)
	}
	// A project's transport is written, but withheld while the project is untrusted.
	if _, _, err := runConfig(t, "set", "--project", project, "kernelTransport.argvPrefix", `["ssh", "-T", "h"]`); err != nil {
		t.Fatal(err)
	}
	out, errOut, _ = runConfig(t, "get", "kernelTransport", "--project", project)
	if !strings.Contains(out, `"docker"`) || !strings.Contains(errOut, "withheld") {
		t.Errorf("untrusted project's transport: %q, %q", out, errOut)
	}
	b, _ := json.Marshal([]string{project})
	if _, _, err := runConfig(t, "set", "trustedProjects", string(b)); err != nil {
		t.Fatal(err)
	}
	out, _, _ = runConfig(t, "get", "kernelTransport", "--project", project)
	if !strings.Contains(out, `"ssh"`) || strings.Contains(out, "python") {
		t.Errorf("trusted project's transport, replacing the global one whole: %q", out)
	}
	out, _, err = runConfig(t, "path", "--project", project)
	want := "global\t" + filepath.Join(global, "settings.json") + "\texists\nproject\t" +
		filepath.Join(project, ".kennel", "settings.json") + "\texists, trusted\n"
	if err != nil || out != want {
		t.Errorf("path: %q, %v; want %q", out, err, want)
	}
	out, errOut, _ = runConfig(t, "get", "truncation")
	if !strings.Contains(out, "51200") || !strings.Contains(errOut, "default") {
		t.Errorf("get of an unset key: %q, %q", out, errOut)
	}
	if _, _, err := runConfig(t, "unset", "logLevel"); err != nil {
		t.Fatal(err)
	}
	if out, _, _ := runConfig(t, "get", "logLevel"); strings.TrimSpace(out) != `"warn"` {
		t.Errorf("after unset: %q", out)
	}
}

func TestConfigRefusalsExit2AndWriteNothing(t *testing.T) {
	global, project := configDirs(t)
	if _, _, err := runConfig(t, "set", "logLevel", "info"); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(global, "settings.json"))
	for _, args := range [][]string{
		{"set", "logLevel", "loud"},
		{"set", "colour", "blue"},
		{"set", "--project", project, "trustedProjects", `["/x"]`},
		{"get", "colour"},
	} {
		_, _, err := runConfig(t, args...)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 {
			t.Errorf("%q: %v, want exit 2", args, err)
		}
	}
	if after, _ := os.ReadFile(filepath.Join(global, "settings.json")); string(after) != string(before) {
		t.Errorf("global file changed: %s", after)
	}
	if _, err := os.Stat(filepath.Join(project, ".kennel", "settings.json")); err == nil {
		t.Error("a refused project set wrote the project file")
	}
}

// TestTheSettingAndTheFlagsAssembleThroughLaunch: with no setting a session is local on
// the identity map; a kernelTransport setting gives its wrapped kernel with the unit's
// path map and env (a variable outside every mount left out, with a warning);
// --transport-argv replaces the wrapper and keeps the rest; --local replaces the unit
// whole; a setting that cannot be read starts nothing unless a flag replaces it whole.
func TestTheSettingAndTheFlagsAssembleThroughLaunch(t *testing.T) {
	global, project := configDirs(t)
	kit := launch.New(launch.Options{LookupEnv: func(k string) (string, bool) {
		v, ok := map[string]string{"LANG": "C.UTF-8", "PROJ": project + "/sub", "AWAY": "/elsewhere"}[k]
		return v, ok
	}})
	defer kit.Close()
	assemble := func(f transportFlags) (*launch.Parts, error) {
		t.Helper()
		spec, _, err := f.resolve(project, "")
		if err != nil {
			return nil, err
		}
		p, err := kit.Assemble(context.Background(), spec, project)
		if err == nil {
			t.Cleanup(p.Release)
		}
		return p, err
	}
	p, err := assemble(transportFlags{})
	if err != nil || p.Kind != "local" || p.SandboxDir != project || p.Transport.Name() != "local" {
		t.Fatalf("no settings: %+v, %v", p, err)
	}
	unit, _ := json.Marshal(map[string]any{
		"argvPrefix": []string{"setsid", "-w", "sh", "-c", `exec "$@"`, "--"},
		"pathMap":    []map[string]string{{"sandbox": "/work", "host": project}},
		"env":        []string{"LANG", "PROJ", "AWAY", "UNSET"},
	})
	if _, _, err := runConfig(t, "set", "kernelTransport", string(unit)); err != nil {
		t.Fatal(err)
	}
	p, err = assemble(transportFlags{})
	if err != nil {
		t.Fatal(err)
	}
	if w, ok := p.Transport.(*wrapped.Transport); !ok || p.SandboxDir != "/work" || w.Options().ArgvPrefix[0] != "setsid" {
		t.Errorf("transport %T in %q", p.Transport, p.SandboxDir)
	}
	if strings.Join(p.Env, " ") != "LANG=C.UTF-8 PROJ=/work/sub" || len(p.Warnings) != 1 {
		t.Errorf("env %q, warnings %q: want AWAY left out with a diagnostic", p.Env, p.Warnings)
	}
	// --transport-argv replaces the wrapper for one run and keeps the rest of the unit.
	p, err = assemble(transportFlags{argv: "env"})
	if w, ok := p.Transport.(*wrapped.Transport); err != nil || !ok || p.SandboxDir != "/work" || !slices.Equal(w.Options().ArgvPrefix, []string{"env"}) {
		t.Errorf("--transport-argv: %+v, %v", p, err)
	}
	// --local replaces the unit whole.
	if p, err = assemble(transportFlags{local: true}); err != nil || p.Kind != "local" || p.SandboxDir != project {
		t.Errorf("--local: %+v, %v", p, err)
	}
	// A transport setting that cannot be read stops the start: no local fall-back.
	if err := os.WriteFile(filepath.Join(global, "settings.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := assemble(transportFlags{}); !errors.Is(err, settings.ErrTransportUnknown) {
		t.Errorf("unreadable settings: %v, want ErrTransportUnknown", err)
	}
	if _, err := assemble(transportFlags{argv: "env"}); !errors.Is(err, settings.ErrTransportUnknown) {
		t.Errorf("unreadable settings and --transport-argv (which keeps the unit's fields): %v", err)
	}
	if p, err := assemble(transportFlags{local: true}); err != nil || p.Kind != "local" {
		t.Errorf("unreadable settings and --local: %+v, %v", p, err)
	}
	if _, err := assemble(transportFlags{argv: `'open`}); !errors.Is(err, settings.ErrBadArgv) {
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 {
			t.Errorf("bad --transport-argv: %v", err)
		}
	}
}
