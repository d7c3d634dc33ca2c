package wrapped_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
	"github.com/kennel-dev/kennel/transports/transporttest"
	"github.com/kennel-dev/kennel/transports/wrapped"
)

// The kernel's environment is exactly the transport's entries and Spec.Env: no host
// variable reaches it, its children, or the interpreter's own initial environment, and
// no value of Spec.Env appears in any process's argv.
func TestEnvironmentIsExactlyTheKernels(t *testing.T) {
	for _, w := range wrappers {
		t.Run(w.name, func(t *testing.T) {
			sb := w.make(t, testOptions())
			secret := "host-secret-" + randomHex()
			t.Setenv("KENNEL_WRAPPED_TEST_HOST_SECRET", secret)
			key, value := marker()
			named := "named value with spaces, = and 'quotes' " + randomHex()
			spec := transports.Spec{Dir: sb.SandboxDir, Env: []string{
				key + "=" + value,
				"KENNEL_WRAPPED_TEST_NAMED=" + named,
				"KENNEL_WRAPPED_TEST_EMPTY=",
				"LANG=C.UTF-8",
			}}
			k, c := transporttest.Start(t, sb.Transport, spec)
			var got map[string]string
			out := run(t, c, "import json, os\nprint(json.dumps(dict(os.environ)))")
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("environment %q: %v", out, err)
			}
			want := []string{"PATH", "MALLOC_MMAP_THRESHOLD_", images.EnvBundle, images.EnvEOFGrace,
				images.EnvOwner, key, "KENNEL_WRAPPED_TEST_NAMED", "KENNEL_WRAPPED_TEST_EMPTY", "LANG"}
			var keys []string
			for k := range got {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			slices.Sort(want)
			if !slices.Equal(keys, want) {
				t.Errorf("kernel environment keys %q, want exactly %q", keys, want)
			}
			for k, v := range map[string]string{
				"KENNEL_WRAPPED_TEST_NAMED": named, "KENNEL_WRAPPED_TEST_EMPTY": "", images.EnvOwner: "stdin",
				"PATH": wrapped.DefaultPath, images.EnvEOFGrace: "1", "LANG": "C.UTF-8",
			} {
				if got[k] != v {
					t.Errorf("%s=%q, want %q", k, got[k], v)
				}
			}
			// A child sees the same; the interpreter's initial environment (env -i) has
			// the fixed start entries only.
			child := run(t, c, "import subprocess\nprint(subprocess.run(['env'], capture_output=True, text=True).stdout)")
			initial := run(t, c, "print(open('/proc/self/environ', 'rb').read().decode('utf-8', 'replace'))")
			for _, text := range []string{out, child, initial} {
				if strings.Contains(text, secret) {
					t.Errorf("the host's secret reached the kernel: %q", text)
				}
			}
			if !strings.Contains(child, "KENNEL_WRAPPED_TEST_NAMED="+named) {
				t.Errorf("a child's environment lacks the named variable: %q", child)
			}
			if strings.Contains(initial, named) {
				t.Errorf("the interpreter's initial environment holds a Spec.Env value: %q", initial)
			}
			// No argv on the host carries a value of Spec.Env: not the wrapper's, not
			// the kernel's, not a child's.
			tree := descendants(k.(*wrapped.Kernel).WrapperPID())
			if !hasKernel(tree) {
				t.Fatalf("no python3 below the wrapper: %v", tree)
			}
			pids := []int{k.(*wrapped.Kernel).WrapperPID()}
			for _, p := range tree {
				pids = append(pids, p.pid)
			}
			for _, pid := range pids {
				argv, _ := os.ReadFile(filepath.Join("/proc", itoa(pid), "cmdline"))
				if strings.Contains(string(argv), named) || strings.Contains(string(argv), value) {
					t.Errorf("process %d's argv %q holds a Spec.Env value", pid, argv)
				}
			}
		})
	}
}

// The kernel works in the sandbox path of its directory: under bwrap the host directory
// is at /work, and a file each side writes is the other side's.
func TestCwdIsTheSandboxPath(t *testing.T) {
	for _, w := range wrappers {
		t.Run(w.name, func(t *testing.T) {
			sb := w.make(t, testOptions())
			if err := os.Mkdir(filepath.Join(sb.HostDir, "sub"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(sb.HostDir, "sub", "from-host"), []byte("host"), 0o600); err != nil {
				t.Fatal(err)
			}
			dir := sb.SandboxDir + "/sub"
			_, c := transporttest.Start(t, sb.Transport, transports.Spec{Dir: dir})
			got := run(t, c, "import os\nprint(os.getcwd())\nprint(open('from-host').read())\nopen('from-kernel', 'w').write('kernel')")
			if want := dir + "\nhost\n"; got != want {
				t.Errorf("kernel printed %q, want %q", got, want)
			}
			b, err := os.ReadFile(filepath.Join(sb.HostDir, "sub", "from-kernel"))
			if err != nil || string(b) != "kernel" {
				t.Errorf("the kernel's file on the host: %q, %v", b, err)
			}
			// The path map agrees with the kernel.
			if host, err := sb.Map.ToHost(dir); err != nil || host != filepath.Join(sb.HostDir, "sub") {
				t.Errorf("map %s to the host: %q, %v", dir, host, err)
			}
		})
	}
}

// A kill ends the kernel and its jobs (the stub's shutdown at stdin EOF ends their process
// groups) while a cell holds the kernel; in bwrap also every process a cell detached from
// the kernel. The host checks /proc: every process below the wrapper before the kill,
// and every process carrying the kernel's marker variable, must be gone.
func TestKillLeavesNoProcessOfTheKernel(t *testing.T) {
	for _, w := range wrappers {
		t.Run(w.name, func(t *testing.T) {
			sb := w.make(t, testOptions())
			key, value := marker()
			k, c := transporttest.Start(t, sb.Transport, transports.Spec{Dir: sb.SandboxDir, Env: []string{key + "=" + value}})
			job(t, c, "sleep 1000")
			job(t, c, "sleep 1000 & sleep 1000; wait")
			want := 4 // sleep; sh and its two sleeps (the kernel's own environ is env -i's)
			if w.ownPIDs {
				run(t, c, `import subprocess
subprocess.Popen(["sleep", "1000"], start_new_session=True)
subprocess.run(["sh", "-c", "sleep 1000 >/dev/null 2>&1 &"])`)
				want += 2
			}
			waitMarked(t, key, value, want)
			busy(t, c)
			tree := descendants(k.(*wrapped.Kernel).WrapperPID())
			if !hasKernel(tree) {
				t.Fatalf("no python3 below the wrapper: %v", tree)
			}
			transporttest.Stop(t, k)
			if exit, _ := k.Wait(); !exit.Killed {
				t.Errorf("exit %+v: want Killed", exit)
			}
			// The EOF grace is 1 s here; 15 s is a failure bound, not a timing claim.
			if left := eventuallyGone(tree, 15*time.Second); len(left) > 0 {
				t.Errorf("processes %v below the wrapper outlived the kill", left)
			}
			if left := eventuallyNoneMarked(key, value, 15*time.Second); len(left) > 0 {
				t.Errorf("processes %v of the kernel outlived the kill", left)
			}
		})
	}
}

// hasKernel reports whether ps holds a python3 process.
func hasKernel(ps []proc) bool {
	for _, p := range ps {
		b, _ := os.ReadFile("/proc/" + itoa(p.pid) + "/comm")
		if strings.HasPrefix(string(b), "python3") {
			return true
		}
	}
	return false
}

// When something in the sandbox keeps the kernel's stdout after the wrapper ended (here
// the kernel itself, a cell holding it through the stub's 30 s EOF grace), Stdout still
// ends DrainGrace after the wrapper's exit, and Wait returns.
func TestStdoutEndsAfterTheWrapperWhateverHoldsIt(t *testing.T) {
	opts := testOptions()
	opts.EOFGrace = 0 // the stub's default, 30 s
	sb := wrappers[0].make(t, opts)
	k, c := transporttest.Start(t, sb.Transport, transports.Spec{Dir: sb.SandboxDir})
	busy(t, c)
	tree := descendants(k.(*wrapped.Kernel).WrapperPID())
	t.Cleanup(func() { eventuallyGone(tree, 0) })
	transporttest.Stop(t, k)
	if !hasKernel(alive(tree)) {
		t.Fatal("the kernel ended with the wrapper: this test needs one that outlives it")
	}
	if err := c.End(15 * time.Second); err != nil {
		t.Fatalf("stdout after the wrapper exited: %v", err)
	}
}

func alive(ps []proc) []proc {
	var out []proc
	for _, p := range ps {
		if p.alive() {
			out = append(out, p)
		}
	}
	return out
}

// Start refuses what cannot start, before anything runs.
func TestStartRefusesBadSpecs(t *testing.T) {
	sb := wrappers[0].make(t, testOptions())
	dir := sb.SandboxDir
	for _, c := range []struct {
		name string
		opts wrapped.Options
		spec transports.Spec
		want error
	}{
		{"no session", wrapped.Options{}, transports.Spec{Dir: dir}, errdefs.ErrInvalidArgument},
		{"no dir", wrapped.Options{}, transports.Spec{SessionID: "s"}, errdefs.ErrInvalidArgument},
		{"relative dir", wrapped.Options{}, transports.Spec{SessionID: "s", Dir: "rel"}, errdefs.ErrInvalidArgument},
		{"NUL in dir", wrapped.Options{}, transports.Spec{SessionID: "s", Dir: "/a\x00b"}, errdefs.ErrInvalidArgument},
		{"env without =", wrapped.Options{}, transports.Spec{SessionID: "s", Dir: dir, Env: []string{"NOEQUALS"}}, errdefs.ErrInvalidArgument},
		{"env empty key", wrapped.Options{}, transports.Spec{SessionID: "s", Dir: dir, Env: []string{"=x"}}, errdefs.ErrInvalidArgument},
		{"env NUL", wrapped.Options{}, transports.Spec{SessionID: "s", Dir: dir, Env: []string{"A=b\x00c"}}, errdefs.ErrInvalidArgument},
		{"env too large", wrapped.Options{}, transports.Spec{SessionID: "s", Dir: dir, Env: []string{"A=" + strings.Repeat("x", kernelstart.MaxBlock)}}, errdefs.ErrInvalidArgument},
		{"python an option", wrapped.Options{Python: "-c"}, transports.Spec{SessionID: "s", Dir: dir}, errdefs.ErrInvalidArgument},
		{"python an assignment", wrapped.Options{Python: "A=b"}, transports.Spec{SessionID: "s", Dir: dir}, errdefs.ErrInvalidArgument},
		{"relative stub dir", wrapped.Options{StubDir: "stub"}, transports.Spec{SessionID: "s", Dir: dir}, errdefs.ErrInvalidArgument},
		{"env owner", wrapped.Options{}, transports.Spec{SessionID: "s", Dir: dir, Env: []string{"KENNEL_KERNEL_OWNER=pid"}}, errdefs.ErrInvalidArgument},
		{"NUL in the prefix", wrapped.Options{ArgvPrefix: []string{"env", "a\x00"}}, transports.Spec{SessionID: "s", Dir: dir}, errdefs.ErrInvalidArgument},
		{"no wrapper", wrapped.Options{ArgvPrefix: []string{"kennel-no-such-wrapper"}}, transports.Spec{SessionID: "s", Dir: dir}, transports.ErrUnavailable},
	} {
		tr := wrapped.New(c.opts)
		k, err := tr.Start(t.Context(), c.spec)
		if err == nil {
			transporttest.Stop(t, k)
			t.Errorf("%s: Start succeeded", c.name)
			continue
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// A stub already in the sandbox (Options.StubDir) is used as it is: no bundle is sent,
// and the hello reports Options.StubHash.
func TestStubAlreadyInTheSandbox(t *testing.T) {
	b, err := images.Stub()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range wrappers {
		t.Run(w.name, func(t *testing.T) {
			// Unpack into the host directory the sandbox sees, then name its sandbox path.
			probe := w.make(t, testOptions())
			cache := filepath.Join(probe.HostDir, "stub")
			if err := os.Mkdir(cache, 0o700); err != nil {
				t.Fatal(err)
			}
			dir, err := b.Unpack(cache)
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(probe.HostDir, dir)
			for _, hash := range []string{b.Hash(), ""} {
				opts := testOptions()
				opts.ArgvPrefix = probe.Transport.Options().ArgvPrefix
				opts.Python = probe.Transport.Options().Python
				opts.StubDir = probe.SandboxDir + "/" + filepath.ToSlash(rel)
				opts.StubHash = hash
				tr := wrapped.New(opts)
				k, err := tr.Start(t.Context(), transports.Spec{SessionID: "s", Dir: probe.SandboxDir})
				if err != nil {
					t.Fatal(err)
				}
				c := transporttest.NewClient(k)
				f, err := c.Hello()
				if err != nil || f.Fields["bundle"] != hash {
					t.Errorf("hello %s, %v; want bundle %q", f.Raw, err, hash)
				}
				if out := run(t, c, "import kennel\nprint(kennel.__file__)"); !strings.HasPrefix(out, opts.StubDir) {
					t.Errorf("the stub runs from %q, want %s", out, opts.StubDir)
				}
				transporttest.Stop(t, k)
				if err := c.End(0); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// With InheritWrapperEnv the interpreter runs right after the prefix (no env -i); the
// kernel's os.environ, and so its children's, is still exactly its own.
func TestInheritWrapperEnvStillReplacesTheEnvironment(t *testing.T) {
	opts := testOptions()
	opts.InheritWrapperEnv = true
	sb := wrappers[0].make(t, opts)
	secret := "host-secret-" + randomHex()
	t.Setenv("KENNEL_WRAPPED_TEST_HOST_SECRET", secret)
	_, c := transporttest.Start(t, sb.Transport, transports.Spec{Dir: sb.SandboxDir, Env: []string{"A=1"}})
	out := run(t, c, "import os, subprocess\nprint(sorted(os.environ))\nprint(subprocess.run(['env'], capture_output=True, text=True).stdout)")
	if strings.Contains(out, secret) || !strings.Contains(out, "'A'") || !strings.Contains(out, "A=1") {
		t.Errorf("kernel environment %q", out)
	}
}
