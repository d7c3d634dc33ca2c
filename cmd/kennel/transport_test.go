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
	"github.com/kennel-dev/kennel/transports/containerd/containerdtest"
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
			`{"containerd": {"network": "bridge"}}`:            "containerd.network",
			`{"containerd": {"user": "kennel"}}`:               "containerd.user",
			`{"containerd": {}, "docker": {}}`:                 "names 2 transports",
			`{"containerd": {"namespace": "k8s.io"}}`:          "containerd.namespace",
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

	t.Run("containerd", func(t *testing.T) {
		d := containerdtest.Daemon(t)
		setTransport(t, global, `{"containerd": {"address": "`+d.Address+`"}}`)
		out, errOut, code := runWith(t, dir, global, nil, "run", "--debug", "-c", whereCell(host), "-c", "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), timeout=2)\n    print('network')\nexcept OSError:\n    print('no network')")
		f := strings.Fields(out)
		if code != 0 || len(f) != 5 || f[0] == "0" || f[1] != "False" || f[2] != dir || f[3] != "no" {
			t.Fatalf("a containerd setting: exit %d, stdout %q, stderr %s", code, out, errOut)
		}
		if !strings.Contains(errOut, "transport=containerd") {
			t.Errorf("the debug log does not name the containerd transport: %s", errOut)
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

// TestRunContainerd: `kennel run --containerd --address A` runs its cells in a locked-down
// container of that containerd — non-root, seeing only its directory, with no network —
// whatever the kernelTransport setting says (here a wrapper that would fail); a
// description flag without its kind, or a missing image, is refused naming the fix.
func TestRunContainerd(t *testing.T) {
	d := containerdtest.Daemon(t)
	global := filepath.Join(t.TempDir(), "config")
	setTransport(t, global, `{"argvPrefix": ["false"]}`)
	dir := t.TempDir()
	host := hostOnlyFile(t)
	out, errOut, code := runWith(t, dir, global, nil, "run", "--containerd", "--address", d.Address, "--memory", "512m", "-c", whereCell(host),
		"-c", "print(open('/sys/fs/cgroup/memory/memory.limit_in_bytes').read().strip() if __import__('os').path.exists('/sys/fs/cgroup/memory/memory.limit_in_bytes') else 'unknown')")
	f := strings.Fields(out)
	if code != 0 || len(f) != 4 || f[0] == "0" || f[1] != "False" || f[2] != dir {
		t.Fatalf("run --containerd: exit %d, stdout %q, stderr %s", code, out, errOut)
	}
	if f[3] != "unknown" && f[3] != strconv.Itoa(512<<20) {
		t.Errorf("run --containerd --memory 512m: the kernel's memory limit is %s", f[3])
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--address", d.Address}, 2, "--address goes with --containerd"},
		{[]string{"--containerd", "--docker-exec", "box"}, 2, "--docker-exec goes with --docker"},
		{[]string{"--containerd", "--docker"}, 2, "give one"},
		{[]string{"--containerd", "--address", d.Address, "--network", "bridge"}, 1, "containerd.network"},
		{[]string{"--containerd", "--address", d.Address, "--image", "docker.io/library/kennel-kernel:000000000000"}, 1, "kennel image build --containerd"},
	} {
		marker := filepath.Join(dir, "ran")
		out, errOut, code := runWith(t, dir, global, nil, append(append([]string{"run"}, c.args...), "-c", "open("+quotePy(marker)+", 'w').close()")...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("run %v: exit %d, stdout %q, stderr %q; want exit %d naming %q", c.args, code, out, errOut, c.code, c.want)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("run %v: the cell ran", c.args)
		}
	}
}
