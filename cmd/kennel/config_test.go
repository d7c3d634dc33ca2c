package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kennel-dev/kennel/settings"
	"github.com/kennel-dev/kennel/transports/local"
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

func TestSetupKernelFromSettings(t *testing.T) {
	global, project := configDirs(t)
	lookup := func(k string) (string, bool) {
		v, ok := map[string]string{"LANG": "C.UTF-8", "PROJ": project + "/sub", "AWAY": "/elsewhere"}[k]
		return v, ok
	}
	s, err := setupKernel(project, "", lookup)
	if err != nil || s.pathMap == nil || s.sandboxDir != s.pathMap.Dir() {
		t.Fatalf("no settings: %+v, %v", s, err)
	}
	if got := s.pathMap.Mounts(); len(got) != 1 || got[0].Sandbox != got[0].Host {
		t.Errorf("no settings: path map %+v, want the identity map of the project", got)
	}
	if _, ok := s.transport.(*local.Transport); !ok {
		t.Errorf("no settings: transport %T, want local", s.transport)
	}
	unit, _ := json.Marshal(map[string]any{
		"argvPrefix": []string{"setsid", "-w", "sh", "-c", `exec "$@"`, "--"},
		"pathMap":    []map[string]string{{"sandbox": "/work", "host": project}},
		"env":        []string{"LANG", "PROJ", "AWAY", "UNSET"},
	})
	if _, _, err := runConfig(t, "set", "kernelTransport", string(unit)); err != nil {
		t.Fatal(err)
	}
	s, err = setupKernel(project, "", lookup)
	if err != nil {
		t.Fatal(err)
	}
	defer s.pathMap.Close()
	if _, ok := s.transport.(*wrapped.Transport); !ok || s.sandboxDir != "/work" {
		t.Errorf("transport %T in %q", s.transport, s.sandboxDir)
	}
	if strings.Join(s.env, " ") != "LANG=C.UTF-8 PROJ=/work/sub" || len(s.warnings) != 1 {
		t.Errorf("env %q, warnings %q: want AWAY left out with a diagnostic", s.env, s.warnings)
	}
	// --transport-argv replaces the wrapper for one run and keeps the rest of the unit.
	s2, err := setupKernel(project, `env`, lookup)
	if err != nil || s2.sandboxDir != "/work" {
		t.Errorf("--transport-argv: %+v, %v", s2, err)
	} else {
		s2.pathMap.Close()
	}
	// A transport setting that cannot be read stops the start: no local fall-back.
	if err := os.WriteFile(filepath.Join(global, "settings.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := setupKernel(project, "", lookup); !errors.Is(err, settings.ErrTransportUnknown) {
		t.Errorf("unreadable settings: %v, want ErrTransportUnknown", err)
	}
	if _, err := setupKernel(project, `'open`, lookup); !errors.Is(err, settings.ErrBadArgv) {
		t.Errorf("bad --transport-argv: %v", err)
	}
}
