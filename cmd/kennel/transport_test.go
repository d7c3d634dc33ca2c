package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	"github.com/kennel-dev/kennel/settings"
	"github.com/kennel-dev/kennel/transports/ssh/sshtest"
)

// whereCell prints where the kernel runs: its uid, whether it sees the host file hostFile
// (a host kernel does; a container or a remote host does not), and its cwd.
func whereCell(hostFile string) string {
	return "import os\nprint(os.getuid(), os.path.exists(" + quotePy(hostFile) + "), os.getcwd())"
}

// hostOnlyFile is a file of this host outside the session's directory.
func hostOnlyFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "host-only")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// runWith runs `kennel run args...` in dir with the global settings in global (and env),
// and returns stdout, stderr and the exit code.
func runWith(t *testing.T, dir, global string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := kennelCmd(t, dir, args...)
	cmd.Env = append(cmd.Env, settings.EnvConfigDir+"="+global)
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// setTransport writes the global kernelTransport unit (through the real `kennel config`).
func setTransport(t *testing.T, global, unit string) {
	t.Helper()
	if err := os.MkdirAll(global, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(global, "settings.json"), []byte(`{"kernelTransport": `+unit+`}`), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestEveryTransportSettingStartsWhatItNames is the hardening issue's first defect: a
// kernelTransport that names docker or ssh ran the kernel on the host, as root. Every
// value now starts exactly the transport it names, with its lock-down, or is refused with
// an error naming the key and what is wrong, and runs nothing; a host kernel only when
// the value is absent or says local.
func TestEveryTransportSettingStartsWhatItNames(t *testing.T) {
	global := filepath.Join(t.TempDir(), "config")
	dir := t.TempDir()
	host := hostOnlyFile(t)

	t.Run("refused", func(t *testing.T) {
		for unit, want := range map[string]string{
			`{}`:                                               "names no transport",
			`{"python": "python3"}`:                            "names no transport",
			`{"docker": {}, "argvPrefix": ["env"]}`:            "names 2 transports",
			`{"docker": {"network": "host"}}`:                  "docker.network",
			`{"docker": {"memory": "lots"}}`:                   "docker.memory",
			`{"docker": {"container": "box", "memory": "2g"}}`: "docker.memory",
			`{"ssh": {}}`:                                      "ssh.target",
			`{"argvPrefix": []}`:                               "argvPrefix",
			`{"argvPrefix": ["env"], "x": 1}`:                  "/kernelTransport/x",
			`"docker"`:                                         "kernelTransport",
			`{"local": {}, "env": ["HOME"]}`:                   "env",
		} {
			setTransport(t, global, unit)
			marker := filepath.Join(dir, "ran")
			out, errOut, code := runWith(t, dir, global, nil, "run", "-c", "open("+quotePy(marker)+", 'w').close()")
			if code == 0 || !strings.Contains(errOut, "kernel transport") || !strings.Contains(errOut, want) {
				t.Errorf("%s: exit %d, stdout %q, stderr %q; want a refusal naming %q", unit, code, out, errOut, want)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatalf("%s: the cell ran", unit)
			}
		}
	})

	t.Run("local", func(t *testing.T) {
		for _, unit := range []string{"", `{"local": {}}`} {
			if unit == "" {
				_ = os.Remove(filepath.Join(global, "settings.json"))
			} else {
				setTransport(t, global, unit)
			}
			out, errOut, code := runWith(t, dir, global, nil, "run", "-c", whereCell(host))
			if code != 0 || strings.TrimSpace(out) != strings.Join([]string{strconv.Itoa(os.Getuid()), "True", dir}, " ") {
				t.Errorf("%q: exit %d, %q %q", unit, code, out, errOut)
			}
		}
	})

	t.Run("docker", func(t *testing.T) {
		dockerneed.KernelEngine(t)
		setTransport(t, global, `{"docker": {}}`)
		out, errOut, code := runWith(t, dir, global, nil, "run", "--debug", "-c", whereCell(host), "-c", "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), timeout=2)\n    print('network')\nexcept OSError:\n    print('no network')")
		f := strings.Fields(out)
		if code != 0 || len(f) != 5 || f[0] == "0" || f[1] != "False" || f[2] != dir || f[3] != "no" {
			t.Fatalf("a docker setting: exit %d, stdout %q, stderr %s", code, out, errOut)
		}
		if !strings.Contains(errOut, "transport=docker") {
			t.Errorf("the debug log does not name the docker transport: %s", errOut)
		}
		// An untrusted project cannot move the kernel to the host.
		project := t.TempDir()
		if err := os.MkdirAll(filepath.Join(project, ".kennel"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(project, ".kennel", "settings.json"), []byte(`{"kernelTransport": {"local": {}}}`), 0o600); err != nil {
			t.Fatal(err)
		}
		out, errOut, code = runWith(t, project, global, nil, "run", "-c", whereCell(host))
		if f := strings.Fields(out); code != 0 || len(f) != 3 || f[1] != "False" || !strings.Contains(errOut, "withheld") {
			t.Errorf("an untrusted project's local unit: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})

	t.Run("ssh", func(t *testing.T) {
		srv := sshtest.Start(t)
		home := sshHome(t, srv)
		setTransport(t, global, `{"ssh": {"target": "`+sshtest.Alias+`"}}`)
		out, errOut, code := runWith(t, dir, global, []string{"HOME=" + home, "SSH_AUTH_SOCK="}, "run", "-c", "import os\nprint(os.getcwd())")
		if code != 0 || strings.TrimSpace(out) != srv.Home {
			t.Fatalf("an ssh setting: exit %d, stdout %q (want the remote home %s), stderr %s", code, out, srv.Home, errOut)
		}
	})
}

func quotePy(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }
