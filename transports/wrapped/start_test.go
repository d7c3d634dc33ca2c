package wrapped

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
)

// No value of Spec.Env ever appears in the argv a Start runs, whatever the values; the
// start block carries them all.
func TestArgvCarriesNoSpecValue(t *testing.T) {
	tr := New(Options{ArgvPrefix: []string{"docker", "exec", "-i", "box"}})
	bc, err := tr.bundle()
	if err != nil {
		t.Fatal(err)
	}
	rapid.Check(t, func(t *rapid.T) {
		values := rapid.SliceOfN(rapid.StringMatching(`[a-zA-Z0-9 ./:=-]{6,30}`), 1, 5).Draw(t, "values")
		var env []string
		for i, v := range values {
			env = append(env, "K"+string(rune('A'+i))+"="+v)
		}
		dir := "/" + rapid.StringMatching(`[a-z]{6,12}`).Draw(t, "dir")
		argv, preamble, err := tr.plan(bc, specOf(dir, env), "python3", "")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(argv[:4], []string{"docker", "exec", "-i", "box"}) || argv[4] != "env" || argv[5] != "-i" {
			t.Fatalf("argv %q does not start with the prefix and env -i", argv[:6])
		}
		for _, a := range argv {
			for _, v := range values {
				if strings.Contains(a, v) {
					t.Fatalf("argv element %.60q holds the value %q", a, v)
				}
			}
			if strings.Contains(a, dir) {
				t.Fatalf("argv element %.60q holds the dir %q", a, dir)
			}
		}
		// The block (kernelstart's tests check its form) carries the dir and the entries.
		want, err := kernelstart.Block{Dir: dir, Env: kernelstart.Env{Base: []string{"PATH=" + DefaultPath},
			Stub: images.KernelEnv(bc.bundle)}.Build(env)}.Encode()
		if err != nil || !bytes.Equal(preamble, append(want, bc.payload...)) {
			t.Fatalf("preamble of %d bytes, want the block of %q and the bundle (%v)", len(preamble), env, err)
		}
	})
}

// A detached kernel's command runs the start program with the bridge before it, and its
// block names the run directory both as the directory to make and as KENNEL_KERNEL_RUN,
// with no owner for the kernel to watch; still no value of Spec.Env in the argv.
func TestADetachedPlanCarriesTheRunDirectoryInTheBlock(t *testing.T) {
	tr := New(Options{ArgvPrefix: []string{"setsid"}, RunDir: "/run/k"})
	bc, err := tr.bundle()
	if err != nil {
		t.Fatal(err)
	}
	argv, preamble, err := tr.plan(bc, specOf("/work", []string{"SECRET=s3cr3t-value"}), "python3", "/run/k/0011223344556677")
	if err != nil {
		t.Fatal(err)
	}
	if want := kernelstart.DetachedProgram(images.BootstrapProgram()); !slices.Contains(argv, want) {
		t.Fatalf("argv %.200q does not run the detached start program", argv)
	}
	for _, a := range argv {
		if strings.Contains(a, "s3cr3t-value") {
			t.Fatalf("argv element %.60q holds a Spec.Env value", a)
		}
	}
	want, err := kernelstart.Block{Dir: "/work", Run: "/run/k/0011223344556677", Env: kernelstart.Env{
		Base: []string{"PATH=" + DefaultPath}, Stub: images.KernelEnv(bc.bundle), Detached: "/run/k/0011223344556677",
	}.Build([]string{"SECRET=s3cr3t-value"})}.Encode()
	if err != nil || !bytes.HasPrefix(preamble, want) {
		t.Fatalf("preamble does not start with the detached block (%v)", err)
	}
	if !bytes.Contains(want, []byte(images.EnvRun+"=/run/k/0011223344556677\x00")) || bytes.Contains(want, []byte(images.EnvOwner+"=")) {
		t.Fatalf("block %q: want KENNEL_KERNEL_RUN and no owner", want)
	}
}
