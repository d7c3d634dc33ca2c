package controller_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/fshost"
	"github.com/kennel-dev/kennel/internal/testtree"
	"github.com/kennel-dev/kennel/pathmap"
)

// TestAKernelCellCallsEveryFsFunctionThroughTheGate runs the real stub on the local
// transport with the fs.* handlers over the identity map of a temporary directory: each
// kennel.fs.* call goes kernel → gate → handler → reply, and paths come back as sandbox paths.
func TestAKernelCellCallsEveryFsFunctionThroughTheGate(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "project")
	outside := filepath.Join(root, "secret.txt")
	testtree.Build(t, root,
		"file project/src/a.py import os\nprint('needle')\n",
		"file project/src/b.py x = 1\n",
		"file project/notes.txt one\ntwo\nthree\n",
		"file project/.gitignore ignored/\n",
		"file secret.txt top secret\n",
		"symlink project/escape $ROOT/secret.txt",
	)
	m, err := pathmap.New(pathmap.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	s := startSession(t, controller.Options{Dir: dir, SandboxDir: m.Dir(), Handler: fshost.New(m, fshost.Options{})})

	cases := []struct{ name, code, want string }{
		{"read", "r = kennel.fs.read('notes.txt', offset=1, limit=1)\n(r['content'], r['absolute'] == os.path.join(os.getcwd(), 'notes.txt'), r['total_lines'])",
			"('two\\n', True, 3)"},
		{"write", "w = kennel.fs.write('out/new.txt', 'hello\\n')\n(open('out/new.txt').read(), w['absolute'] == os.path.join(os.getcwd(), 'out/new.txt'))",
			"('hello\\n', True)"},
		{"edit", "e = kennel.fs.edit('src/b.py', edits=[('x = 1', 'x = 2')], moves=[('notes.txt', 'moved.txt')])\n(open('src/b.py').read(), os.path.exists('moved.txt'), e['moves'][0]['destination'] == os.path.join(os.getcwd(), 'moved.txt'))",
			"('x = 2\\n', True, True)"},
		{"grep", "g = kennel.fs.grep('needle')\n[(os.path.relpath(m['path']), m['line']) for m in g['matches']]",
			"[('src/a.py', 2)]"},
		{"glob", "sorted(os.path.relpath(p) for p in kennel.fs.glob('**/*.py')['paths'])",
			"['src/a.py', 'src/b.py']"},
		{"edit-no-match", "try:\n    kennel.fs.edit('src/b.py', edits=[('nope', 'x')])\nexcept kennel.HostError as e:\n    c = e.code\nc",
			"'no_match'"},
		{"outside-absolute", "try:\n    kennel.fs.read(" + pyQuote(outside) + ")\nexcept kennel.HostError as e:\n    c = (e.code, e.reason)\nc",
			"('outside', 'outside')"},
		{"outside-symlink", "try:\n    kennel.fs.read('escape')\nexcept kennel.HostError as e:\n    c = e.code\nc",
			"'outside'"},
		{"outside-dotdot", "try:\n    kennel.fs.write('../secret.txt', 'pwned')\nexcept kennel.HostError as e:\n    c = e.code\nc",
			"'outside'"},
		{"home", "try:\n    kennel.fs.read('~/x')\nexcept kennel.HostError as e:\n    c = e.code\nc",
			"'outside'"},
	}
	execute(t, s, "import kennel, os")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, _ := execute(t, s, tc.code)
			if res.Status != "ok" || res.Result == nil || *res.Result != tc.want {
				t.Fatalf("got %+v (error %+v), want %s", res, res.Error, tc.want)
			}
		})
	}
	if b, _ := os.ReadFile(outside); string(b) != "top secret\n" {
		t.Fatalf("a refused write changed the file outside: %q", b)
	}
}

// pyQuote quotes s as a Python string literal (s holds no quote or backslash here).
func pyQuote(s string) string { return "'" + s + "'" }
