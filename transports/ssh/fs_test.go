package ssh_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/fshost"
	"github.com/kennel-dev/kennel/fshost/fshosttest"
	"github.com/kennel-dev/kennel/fshost/fsroot"
	"github.com/kennel-dev/kennel/ignore"
	"github.com/kennel-dev/kennel/internal/testtree"
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
	testtree.Build(t, srv.Dir,
		"dir ws/sub",
		"file ws/a.txt one\ntwo\n",
		"file:0600 secret secret\n",
		"symlink ws/out $ROOT/secret",
		"symlink ws/sub/up ..",
	)
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

// The fs.* conformance table against a remote workspace over SFTP: the same answers as
// the local path map, with the workspace's real path for $W.
func TestRemoteFSConformance(t *testing.T) {
	srv := sshtest.Start(t)
	hosts := newHosts(t, srv)
	fshosttest.Run(t, func(t *testing.T, dir string, readOnly bool) fshosttest.Served {
		fsys, err := hosts.OpenFS(testCtx(t), sshtest.Alias+":"+dir, ssh.FSOptions{ReadOnly: readOnly})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fsys.Close() })
		return fshosttest.Served{Handler: fshost.New(fsys, fshost.Options{}), Dir: fsys.Root()}
	})
}

// A remote fs.read of a 48 MiB file, page by page (offset, limit), streams the file: the
// Go heap grows by far less than the file's size.
func TestRemoteReadOfALargeFileStreams(t *testing.T) {
	srv := sshtest.Start(t)
	hosts := newHosts(t, srv)
	ws := filepath.Join(srv.Dir, "big")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	const size, lineLen = 48 << 20, 64
	line := func(i int) string { return fmt.Sprintf("%-*d\n", lineLen-1, i) }
	f, err := os.Create(filepath.Join(ws, "big.txt"))
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for i := range size / lineLen {
		w.WriteString(line(i))
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	fsys, err := hosts.OpenFS(testCtx(t), sshtest.Alias+":"+ws, ssh.FSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	defer debug.SetGCPercent(debug.SetGCPercent(10)) // collect garbage soon: the peak is what is held
	runtime.GC()
	base := heapBytes()
	peak := base
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				peak = max(peak, heapBytes())
			}
		}
	}()
	lines := size / lineLen
	for _, off := range []int{0, lines / 2, lines - 10} {
		res, err := fsys.Serve(testCtx(t), "fs.read", json.RawMessage(fmt.Sprintf(`{"path": "big.txt", "offset": %d, "limit": 100}`, off)))
		if err != nil {
			t.Fatalf("fs.read offset %d: %v", off, err)
		}
		r := res.(*fshost.ReadResult)
		want := min(100, lines-off)
		if r.TotalLines != lines || r.Lines != want || !strings.HasPrefix(r.Content, line(off)) || len(r.Content) != want*lineLen {
			t.Fatalf("fs.read offset %d: %d lines of %d, content %.70q", off, r.Lines, r.TotalLines, r.Content)
		}
	}
	close(stop)
	<-done
	grew := int64(peak) - int64(base)
	t.Logf("heap grew by %.1f MiB reading a %d MiB remote file", float64(grew)/(1<<20), size>>20)
	if grew > size/4 {
		t.Fatalf("the heap grew by %d MiB reading a %d MiB file by pages: the file is held in memory", grew>>20, size>>20)
	}
}

// heapBytes is the memory held by heap objects now (live, and dead ones not yet swept).
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// A remote WalkDir ends as fsroot.Root says: fn's error is returned as is, fs.SkipAll is
// a nil error, a context ended mid-walk is its error, a directory gone between its
// listing and its walk is not_found naming it, and a tree deeper than ignore.MaxDepth is
// invalid.
func TestRemoteWalkDirEnds(t *testing.T) {
	srv := sshtest.Start(t)
	hosts := newHosts(t, srv)
	ws := filepath.Join(srv.Dir, "walk")
	testtree.Build(t, ws, "file a/1", "file b/c/2", "dir deep/"+strings.Repeat("d/", ignore.MaxDepth+1))
	fsys, err := hosts.OpenFS(testCtx(t), sshtest.Alias+":"+ws, ssh.FSOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	ctx := testCtx(t)
	top := fsys.Root()

	boom := errors.New("boom")
	var seen []string
	err = fsys.WalkDir(ctx, "", ".", func(e fsroot.Entry) error {
		seen = append(seen, e.Rel)
		if e.Rel == "a/1" {
			return boom
		}
		return nil
	})
	if err != boom || !slices.Equal(seen, []string{"a", "a/1"}) {
		t.Errorf("fn's error: got %v after %q; want boom itself after [a a/1]", err, seen)
	}

	seen = nil
	err = fsys.WalkDir(ctx, "", ".", func(e fsroot.Entry) error {
		seen = append(seen, e.Rel)
		if e.Rel == "b" {
			return fs.SkipAll
		}
		return nil
	})
	if err != nil || !slices.Equal(seen, []string{"a", "a/1", "b"}) {
		t.Errorf("fs.SkipAll: got %v after %q; want nil after [a a/1 b]", err, seen)
	}

	cctx, cancel := context.WithCancel(ctx)
	err = fsys.WalkDir(cctx, "", ".", func(e fsroot.Entry) error {
		if e.Rel == "a" {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("context ended mid-walk: %v, want context.Canceled", err)
	}

	err = fsys.WalkDir(ctx, "", "b", func(e fsroot.Entry) error {
		if e.Rel == "c" {
			return os.RemoveAll(filepath.Join(ws, "b", "c")) // listed, now gone
		}
		return nil
	})
	if !errors.Is(err, fsroot.ErrNotFound) || !strings.Contains(err.Error(), top+"/b/c") {
		t.Errorf("directory gone: %v, want not_found naming %s/b/c", err, top)
	}

	start := time.Now()
	err = fsys.WalkDir(ctx, "", "deep", func(fsroot.Entry) error { return nil })
	if !errors.Is(err, fsroot.ErrInvalid) || !errors.Is(err, ignore.ErrTooDeep) {
		t.Errorf("too deep: %v, want invalid (ignore.ErrTooDeep)", err)
	}
	t.Logf("a remote walk of a tree deeper than ignore.MaxDepth ended in %v", time.Since(start))
}
