package images

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func TestResolvePythonFindsTheRealInterpreter(t *testing.T) {
	p := needPython(t)
	if !filepath.IsAbs(p) {
		t.Fatalf("%q is not absolute", p)
	}
	// The path is the interpreter itself: asked again, it names itself.
	again, err := ResolvePython(context.Background(), p)
	if err != nil || again != p {
		t.Errorf("resolve %s: %s, %v", p, again, err)
	}
	out, err := exec.Command(p, "-I", "-S", "-c", "import sys; print(sys.executable)").Output()
	if err != nil || strings.TrimSpace(string(out)) != p {
		t.Errorf("%s runs as %q (%v)", p, out, err)
	}
}

func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestResolvePythonErrors(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]struct{ name, reason string }{
		"missing":      {"kennel-no-such-python", "not found"},
		"missing path": {filepath.Join(dir, "nope"), "not found"},
		"fails":        {writeScript(t, dir, "fails", "echo broken >&2; exit 3"), "does not run: broken"},
		"old":          {writeScript(t, dir, "old", "echo /bin/sh; echo 3.8.10"), "is Python 3.8.10"},
		"python2":      {writeScript(t, dir, "two", "echo /bin/sh; echo 2.7.18"), "is Python 2.7.18"},
		"relative":     {writeScript(t, dir, "rel", "echo python; echo 3.11.0"), "no absolute sys.executable"},
		"gone":         {writeScript(t, dir, "gone", "echo /nonexistent/python; echo 3.11.0"), "not there"},
		"garbage":      {writeScript(t, dir, "garbage", "echo hello"), "answered"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ResolvePython(context.Background(), c.name)
			if !errors.Is(err, ErrNoPython) || !errdefs.IsUnavailable(err) {
				t.Fatalf("err = %v, want ErrNoPython and ErrUnavailable", err)
			}
			var pe *PythonError
			if !errors.As(err, &pe) || !strings.Contains(pe.Reason, c.reason) {
				t.Errorf("reason = %q, want %q", pe.Reason, c.reason)
			}
			if !strings.Contains(err.Error(), "install Python 3.9") {
				t.Errorf("error does not name the fix: %v", err)
			}
		})
	}
	// A fake 3.12 that names a real executable passes.
	ok := writeScript(t, dir, "ok", "echo /bin/sh; echo 3.12.1")
	if got, err := ResolvePython(context.Background(), ok); err != nil || got != "/bin/sh" {
		t.Errorf("fake 3.12: %s, %v", got, err)
	}
}

func TestResolvePythonHonoursContext(t *testing.T) {
	slow := writeScript(t, t.TempDir(), "slow", "exec sleep 100")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := ResolvePython(ctx, slow)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}
