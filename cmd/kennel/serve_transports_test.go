package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/api"
	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testneed/dockerneed"
	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/settings"
	ctrd "github.com/kennel-dev/kennel/transports/containerd"
	"github.com/kennel-dev/kennel/transports/containerd/containerdtest"
	"github.com/kennel-dev/kennel/transports/docker"
	"github.com/kennel-dev/kennel/transports/ssh/sshtest"
	"github.com/kennel-dev/kennel/transports/wrapped/wrappedtest"
)

// startServe runs `kennel serve` (the test binary as kennel, in its own process) on sock
// with the global settings in global, waits for its socket, and returns a stop that ends
// it as SIGTERM does and checks it exited 0 and removed its socket. The daemon inherits
// the test's environment: its HOME holds the ssh config and known_hosts it dials with.
func startServe(t *testing.T, sock, state, global string) (stop func()) {
	t.Helper()
	cmd := kennelCmd(t, t.TempDir(), "serve", "--socket", sock, "--state", state)
	cmd.Env = append(cmd.Env, settings.EnvConfigDir+"="+global)
	var errb syncBuf
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	ended := false
	end := func() error {
		t.Helper()
		if ended {
			return nil
		}
		ended = true
		if err := testproc.Kill(cmd.Process.Pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Errorf("SIGTERM to kennel serve: %v", err)
		}
		select {
		case err := <-done:
			return err
		case <-time.After(60 * time.Second):
			_ = testproc.Kill(cmd.Process.Pid, syscall.SIGKILL)
			<-done
			t.Errorf("kennel serve did not end within 60s of SIGTERM; stderr:\n%s", errb.String())
			return nil
		}
	}
	t.Cleanup(func() { _ = end() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		// The socket's file appears at bind, a moment before it listens: a dial that
		// connects is the proof.
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		select {
		case err := <-done:
			ended = true
			t.Fatalf("kennel serve ended before serving: %v; stderr:\n%s", err, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("kennel serve made no socket within 20s; stderr:\n%s", errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return func() {
		t.Helper()
		if err := end(); err != nil {
			t.Errorf("kennel serve after SIGTERM: %v; stderr:\n%s", err, errb.String())
		}
		if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket left after kennel serve stopped: %v", err)
		}
		if t.Failed() {
			t.Logf("kennel serve stderr:\n%s", errb.String())
		}
	}
}

// syncBuf is a bytes.Buffer that a process's output copier and the test may share.
type syncBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// sessionsOf returns the daemon's sessions, as `kennel ps --json` lists them.
func sessionsOf(t *testing.T, sock, global string) []api.Session {
	t.Helper()
	out, errOut, code := runWith(t, t.TempDir(), global, nil, "ps", "--socket", sock, "--json")
	var l api.SessionList
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil {
		t.Fatalf("ps --json: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	return l.Sessions
}

// TestTheCLIVerbsServeEveryTransport: the real `kennel serve`, driven by the CLI verbs
// only, creates a session on each transport — local (--local), wrapped (--transport-argv
// running bwrap, with the python and pathMap of the kernelTransport setting), Docker
// (--docker: the real engine, locked down), containerd (--containerd --address: a
// containerd the test starts) and ssh (--ssh: a real sshd the daemon reaches through the
// ~/.ssh/config and known_hosts of its HOME) — runs a cell in it with `kennel
// exec`, and removes it with `kennel rm`; each kernel runs where its transport says, `kennel
// ps` names the transport and lists the session no more once it is removed, and a removed
// Docker or containerd session leaves no container.
func TestTheCLIVerbsServeEveryTransport(t *testing.T) {
	srv := sshtest.Start(t)
	sshHome(t, srv) // the daemon's HOME, and so its ~/.ssh/config and known_hosts
	base, err := os.MkdirTemp("", "kt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) }) // after the daemon's end, which is registered later
	sock := filepath.Join(base, "run", "kennel.sock")
	global := filepath.Join(base, "config")
	stop := startServe(t, sock, filepath.Join(base, "state"), global)
	hostOnly := hostOnlyFile(t)
	where := "import os\n(os.getuid(), os.path.exists(" + quotePy(hostOnly) + "), os.getcwd())"

	type tc struct {
		name string
		// create returns the working directory (empty for ssh), the settings directory
		// `kennel create` reads, and its transport flags.
		create func(t *testing.T) (dir, global string, flags []string)
		want   func(t *testing.T, dir, res string)
		// gone checks what the session leaves once removed, beyond `kennel ps`.
		gone func(t *testing.T, id string)
	}
	var engine *client.Client
	var ctrdD *containerdtest.D
	for _, c := range []tc{
		{name: "local", create: func(t *testing.T) (string, string, []string) {
			return t.TempDir(), global, []string{"--local"}
		}, want: func(t *testing.T, dir, res string) {
			if want := "(" + strconv.Itoa(os.Getuid()) + ", True, '" + dir + "')"; res != want {
				t.Errorf("local: %s, want %s", res, want)
			}
		}},
		{name: "wrapped", create: func(t *testing.T) (string, string, []string) {
			testneed.Tools(t, "bwrap")
			dir := t.TempDir()
			prefix, err := json.Marshal(wrappedtest.BwrapPrefix(t, dir, wrappedtest.SandboxDir))
			if err != nil {
				t.Fatal(err)
			}
			// --transport-argv keeps the setting's python and pathMap (a settings
			// directory of this create's own says them) and replaces its wrapper: one
			// that would fail every kernel (false) shows the flag's is the one run.
			own := filepath.Join(t.TempDir(), "config")
			unit, err := json.Marshal(map[string]any{
				"argvPrefix": []string{"false"},
				"python":     wrappedtest.SandboxPython(t),
				"pathMap":    []map[string]string{{"sandbox": wrappedtest.SandboxDir, "host": dir}},
			})
			if err != nil {
				t.Fatal(err)
			}
			setTransport(t, own, string(unit))
			return dir, own, []string{"--transport-argv", string(prefix)}
		}, want: func(t *testing.T, dir, res string) {
			if want := "(" + strconv.Itoa(os.Getuid()) + ", False, '" + wrappedtest.SandboxDir + "')"; res != want {
				t.Errorf("wrapped: %s, want %s", res, want)
			}
		}},
		{name: "docker", create: func(t *testing.T) (string, string, []string) {
			engine = dockerneed.KernelEngine(t)
			return t.TempDir(), global, []string{"--docker"}
		}, want: func(t *testing.T, dir, res string) {
			if !strings.HasSuffix(res, ", False, '"+dir+"')") || strings.HasPrefix(res, "(0,") {
				t.Errorf("docker: %s: want a non-root kernel that sees only its mount", res)
			}
		}, gone: func(t *testing.T, id string) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := engine.ContainerList(ctx, client.ContainerListOptions{All: true,
				Filters: make(client.Filters).Add("label", docker.LabelSession+"="+id)})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Items) != 0 {
				t.Errorf("%d containers left by removed session %s", len(res.Items), id)
			}
		}},
		{name: "containerd", create: func(t *testing.T) (string, string, []string) {
			ctrdD = containerdtest.Daemon(t)
			return t.TempDir(), global, []string{"--containerd", "--address", ctrdD.Address}
		}, want: func(t *testing.T, dir, res string) {
			if !strings.HasSuffix(res, ", False, '"+dir+"')") || strings.HasPrefix(res, "(0,") {
				t.Errorf("containerd: %s: want a non-root kernel that sees only its mount", res)
			}
		}, gone: func(t *testing.T, id string) {
			ctx, cancel := context.WithTimeout(namespaces.WithNamespace(context.Background(), ctrd.Namespace), 30*time.Second)
			defer cancel()
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				cs, err := ctrdD.Client.Containers(ctx, `labels."`+ctrd.LabelSession+`"==`+strconv.Quote(id))
				if err != nil {
					t.Fatal(err)
				}
				if len(cs) == 0 {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d containers left in containerd by removed session %s", len(cs), id)
				}
			}
		}},
		{name: "ssh", create: func(t *testing.T) (string, string, []string) {
			return "", global, []string{"--ssh", sshtest.Alias}
		}, want: func(t *testing.T, dir, res string) {
			if !strings.HasSuffix(res, "'"+srv.Home+"')") {
				t.Errorf("ssh: %s, want the remote home %s", res, srv.Home)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, own, flags := c.create(t)
			args := append([]string{"create", "--socket", sock}, flags...)
			if dir != "" {
				args = append(args, "-C", dir)
			}
			out, errOut, code := runWith(t, t.TempDir(), own, nil, args...)
			id := strings.TrimSpace(out)
			if code != 0 || id == "" {
				t.Fatalf("create %v: exit %d, stdout %q, stderr %q", flags, code, out, errOut)
			}
			listed := false
			for _, s := range sessionsOf(t, sock, global) {
				if s.ID == id {
					listed = true
					if s.Kernel.Transport == nil || *s.Kernel.Transport != c.name {
						t.Errorf("ps lists %s with transport %v, want %s", id, strOr(s.Kernel.Transport), c.name)
					}
				}
			}
			if !listed {
				t.Errorf("ps does not list the new session %s", id)
			}
			out, errOut, code = runWith(t, t.TempDir(), global, nil, "exec", "--socket", sock, id, "-c", where)
			if code != 0 {
				t.Fatalf("exec: exit %d, stdout %q, stderr %q", code, out, errOut)
			}
			t.Logf("%s kernel: (uid, sees the host-only file, cwd) = %s", c.name, strings.TrimSpace(out))
			c.want(t, dir, strings.TrimSpace(out))
			out, errOut, code = runWith(t, t.TempDir(), global, nil, "rm", "--socket", sock, id)
			if code != 0 || strings.TrimSpace(out) != id {
				t.Fatalf("rm: exit %d, stdout %q, stderr %q", code, out, errOut)
			}
			for _, s := range sessionsOf(t, sock, global) {
				if s.ID == id {
					t.Errorf("ps still lists removed session %s: %+v", id, s)
				}
			}
			if _, errOut, code = runWith(t, t.TempDir(), global, nil, "exec", "--socket", sock, id, "-c", "1"); code != 1 || !strings.Contains(errOut, "not_found") {
				t.Errorf("exec in removed session: exit %d, stderr %q; want 1 and not_found", code, errOut)
			}
			if c.gone != nil {
				c.gone(t, id)
			}
		})
	}
	stop()
}
