package ssh_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/transports/ssh"
	"github.com/kennel-dev/kennel/transports/ssh/sshtest"
)

// A cell runs on the "remote" host; its fs.read and fs.write are served over SFTP by FS,
// and escapes (.., an absolute path elsewhere, a symlink out, ~) are refused with
// "outside".
func TestRemoteCellFilesOverSFTP(t *testing.T) {
	srv := sshtest.Start(t)
	hosts := newHosts(t, srv)
	ws := filepath.Join(srv.Dir, "ws")
	secret := filepath.Join(srv.Dir, "secret")
	for _, err := range []error{
		os.MkdirAll(filepath.Join(ws, "sub"), 0o755),
		os.WriteFile(filepath.Join(ws, "a.txt"), []byte("one\ntwo\n"), 0o644),
		os.WriteFile(secret, []byte("secret\n"), 0o600),
		os.Symlink(secret, filepath.Join(ws, "out")),
		os.Symlink("..", filepath.Join(ws, "sub", "up")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	fsys, err := hosts.OpenFS(testCtx(t), sshtest.Alias+":"+ws, ssh.FSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := controller.Start(ctx, controller.Options{
		Transport: ssh.New(hosts, ssh.Options{Target: sshtest.Alias}),
		Dir:       ws,
		Handler:   fsys,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	run := func(code string) string {
		t.Helper()
		res, err := s.Execute(ctx, code, nil)
		if err != nil {
			t.Fatalf("cell %q: %v", code, err)
		}
		if res.Status != "ok" {
			t.Fatalf("cell %q: %+v", code, res)
		}
		if res.Result == nil {
			return ""
		}
		return *res.Result
	}
	if got := run("import kennel.fs as f\nf.read('a.txt')['content']"); got != `'one\ntwo\n'` {
		t.Errorf("read: %s", got)
	}
	run("f.write('sub/new/b.txt', 'made remotely\\n')")
	if b, err := os.ReadFile(filepath.Join(ws, "sub", "new", "b.txt")); err != nil || string(b) != "made remotely\n" {
		t.Errorf("written file: %q, %v", b, err)
	}
	escape := `def code(fn, *a):
    try:
        fn(*a)
        return 'ok'
    except kennel.HostError as e:
        return e.code
import kennel
`
	run(escape)
	for _, c := range []string{
		"code(f.read, '../secret')",
		"code(f.read, " + quote(secret) + ")",
		"code(f.read, 'out')",
		"code(f.read, 'sub/up/../secret')",
		"code(f.read, '~/x')",
		"code(f.write, 'out', 'x')",
		"code(f.write, 'sub/up/../evil', 'x')",
	} {
		if got := run(c); got != "'outside'" {
			t.Errorf("%s = %s, want 'outside'", c, got)
		}
	}
	if b, _ := os.ReadFile(secret); string(b) != "secret\n" {
		t.Errorf("secret changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(srv.Dir, "evil")); !os.IsNotExist(err) {
		t.Errorf("an escaping write created a file: %v", err)
	}
	if got := run("code(f.read, 'missing.txt')"); got != "'not_found'" {
		t.Errorf("missing file: %s", got)
	}
	if got := run("import os\nos.environ.get('KENNEL_REMOTE_RUN', '')"); !strings.HasPrefix(got, "'") || got == "''" {
		t.Errorf("the cell does not run as a remote kernel: %s", got)
	}
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }
