package fshost

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kennel-dev/kennel/fshost/fsroot"
	"github.com/kennel-dev/kennel/internal/testtree"
	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/protocol"
)

// env is a session with two mounts: /work (read-write) and /ro (read-only), and a
// directory outside both.
type env struct {
	root, work, ro, out string
	m                   *pathmap.Map
	s                   *Server
}

func newEnv(t testing.TB, opts Options, specs ...string) *env {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	e := &env{root: root, work: root + "/w", ro: root + "/r", out: root + "/outside"}
	for _, d := range []string{e.work, e.ro, e.out} {
		must(t, os.MkdirAll(d, 0o755))
	}
	must(t, os.WriteFile(e.out+"/secret", []byte("SENTINEL\n"), 0o644))
	testtree.Build(t, root, specs...)
	e.m, err = pathmap.New(pathmap.Config{Dir: e.work, Mounts: []pathmap.Mount{
		{Sandbox: "/work", Host: e.work},
		{Sandbox: "/ro", Host: e.ro, ReadOnly: true},
	}})
	must(t, err)
	t.Cleanup(func() { e.m.Close() })
	e.s = New(e.m, opts)
	return e
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// call serves one request with JSON arguments and decodes the JSON result into out,
// the way a controller would carry it.
func (e *env) call(t testing.TB, typ, args string, out any) error {
	t.Helper()
	res, err := e.s.Serve(context.Background(), typ, json.RawMessage(args))
	if err != nil {
		if _, ok := err.(interface{ Code() string }); !ok {
			t.Fatalf("%s %s: error %v has no Code", typ, args, err)
		}
		if res != nil {
			t.Fatalf("%s %s: a result with an error", typ, args)
		}
		return err
	}
	b, err := json.Marshal(res)
	must(t, err)
	if out != nil {
		must(t, json.Unmarshal(b, out))
	}
	return nil
}

// code returns the Code of an error, "" for nil.
func code(err error) string {
	if err == nil {
		return ""
	}
	return Describe(err).Code
}

func TestServes(t *testing.T) {
	e := newEnv(t, Options{})
	for _, typ := range []string{"fs.read", "fs.write", "fs.edit", "fs.grep", "fs.glob"} {
		if !e.s.Serves(typ) {
			t.Errorf("Serves(%q) = false", typ)
		}
	}
	for _, typ := range []string{"", "fs.delete", "rlm.run", "FS.READ"} {
		if e.s.Serves(typ) {
			t.Errorf("Serves(%q) = true", typ)
		}
		if err := e.call(t, typ, `{}`, nil); code(err) != "unserved" {
			t.Errorf("Serve(%q): %v; want unserved", typ, err)
		}
	}
	for _, args := range []string{`[1]`, `{"path": 3}`, `"x"`, `{`} {
		if err := e.call(t, "fs.read", args, nil); code(err) != "invalid" {
			t.Errorf("fs.read %s: %v; want invalid", args, err)
		}
	}
}

func TestDescribe(t *testing.T) {
	e := newEnv(t, Options{}, "symlink w/out $ROOT/outside")
	err := e.call(t, "fs.read", `{"path": "out/secret"}`, nil)
	info := Describe(err)
	if info.Code != "outside" || info.Reason != "outside" || info.Version != "transport@1" {
		t.Fatalf("Describe(outside) = %+v", info)
	}
	if strings.Contains(info.Message, e.root) {
		t.Fatalf("message %q names a host path", info.Message)
	}
	info = Describe(errors.New(strings.Repeat("x", 5000)))
	if info.Code != "internal" || len(info.Message) > MaxMessage {
		t.Fatalf("Describe(plain) = %q, %d bytes", info.Code, len(info.Message))
	}
	if info := Describe(fail("x", "/p", fsroot.ErrBinary, "")); info.Code != "binary" || info.Version != "" {
		t.Fatalf("Describe(binary) = %+v", info)
	}
}

// Every fs.* request with a path outside, or led outside by a symlink, is refused with
// outside and touches nothing outside.
func TestRefusedBeforeAnyHandler(t *testing.T) {
	e := newEnv(t, Options{}, "symlink w/out $ROOT/outside", "symlink w/up ..", "file w/f x\n",
		"symlink w/dangle $ROOT/outside/new", "symlink w/outfile ../outside/secret")
	reqs := []struct{ typ, args string }{
		{"fs.read", `{"path": "out/secret"}`},
		{"fs.read", `{"path": "up/outside/secret"}`},
		{"fs.read", `{"path": "/etc/passwd"}`},
		{"fs.read", `{"path": "~/x"}`},
		{"fs.read", `{"path": "f", "cwd": "/"}`},
		{"fs.write", `{"path": "out/new", "content": "x"}`},
		{"fs.write", `{"path": "../x", "content": "x"}`},
		{"fs.write", `{"path": "dangle", "content": "x"}`},
		{"fs.write", `{"path": "outfile", "content": "x"}`},
		{"fs.edit", `{"path": "outfile", "edits": [{"old": "SENTINEL", "new": "x"}]}`},
		{"fs.edit", `{"path": "out/secret", "edits": [{"old": "SENTINEL", "new": "x"}]}`},
		{"fs.edit", `{"moves": [{"from": "f", "to": "out/f"}]}`},
		{"fs.edit", `{"moves": [{"from": "out/secret", "to": "stolen"}]}`},
		{"fs.grep", `{"pattern": "SENTINEL", "path": "out"}`},
		{"fs.grep", `{"pattern": "SENTINEL", "path": "/"}`},
		{"fs.glob", `{"pattern": "*", "path": "out"}`},
		{"fs.glob", `{"pattern": "/outside/*"}`},
		{"fs.glob", `{"pattern": "*", "cwd": "~"}`},
	}
	before := testtree.List(t, e.out)
	for _, r := range reqs {
		err := e.call(t, r.typ, r.args, nil)
		if info := Describe(err); info.Code != "outside" || info.Version != "transport@1" {
			t.Errorf("%s %s: %+v; want an outside refusal", r.typ, r.args, info)
		}
	}
	if after := testtree.List(t, e.out); !slices.Equal(after, before) {
		t.Fatalf("outside changed: %q, was %q", after, before)
	}
	if _, err := os.Lstat(e.work + "/stolen"); err == nil {
		t.Fatalf("the sentinel was moved in")
	}
}

// Every code a Server's errors can carry is a code of the protocol: a code the protocol
// does not know would reach the kernel as internal.
func TestEveryCodeIsAProtocolCode(t *testing.T) {
	sentinels := fsroot.Classes()
	for _, s := range sentinels {
		c := s.(interface{ Code() string }).Code()
		if !protocol.Code(c).Valid() {
			t.Errorf("%v has code %q, which is not a protocol code", s, c)
		}
	}
}
