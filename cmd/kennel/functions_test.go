package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKennelFunctionsListsASessionsRemoteFunctions(t *testing.T) {
	base, err := os.MkdirTemp("", "kt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	sock := filepath.Join(base, "run", "kennel.sock")
	global := filepath.Join(base, "config")
	stop := startServe(t, sock, filepath.Join(base, "state"), global)
	defer stop()
	out, errOut, code := runWith(t, t.TempDir(), global, nil, "create", "--socket", sock, "--local", "-C", t.TempDir())
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("create: exit %d, %q, %q", code, out, errOut)
	}
	cell := "@kennel.remote\ndef add(a: int, b: int = 1, **more) -> int:\n    \"\"\"Add two numbers.\n\n    More.\"\"\"\n    return a + b\n" +
		"@kennel.remote\nasync def ping():\n    return 'pong'\n"
	if out, errOut, code = runWith(t, t.TempDir(), global, nil, "exec", "--socket", sock, id, "-c", cell); code != 0 {
		t.Fatalf("exec: exit %d, %q, %q", code, out, errOut)
	}
	out, errOut, code = runWith(t, t.TempDir(), global, nil, "functions", "--socket", sock, id)
	if code != 0 {
		t.Fatalf("functions: exit %d, %q, %q", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") ||
		!strings.Contains(lines[1], "add") || !strings.Contains(lines[1], "(a: integer, b?: integer, **)") || !strings.Contains(lines[1], "Add two numbers.") || strings.Contains(lines[1], "More.") ||
		!strings.Contains(lines[2], "async ping") || !strings.Contains(lines[2], "()") {
		t.Errorf("kennel functions:\n%s", out)
	}
	out, _, code = runWith(t, t.TempDir(), global, nil, "functions", "--socket", sock, "--json", id)
	if code != 0 || !strings.Contains(out, `"schema"`) {
		t.Errorf("kennel functions --json: %s", out)
	}
}
