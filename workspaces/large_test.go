package workspaces

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// writeMany writes n small files under dir, 100 a directory (see writeFiles).
func writeMany(t testing.TB, dir string, n int) {
	t.Helper()
	writeFiles(t, dir, n, "d%03d", "f%05d", func(i int) []byte { return []byte(fmt.Sprint(i)) })
}

// writeFiles writes n files under dir, 100 a directory, four directories at once:
// directory d is named by dirFormat from d, file i by fileFormat from i, and holds data(i).
func writeFiles(t testing.TB, dir string, n int, dirFormat, fileFormat string, data func(i int) []byte) {
	t.Helper()
	dirs := (n + 99) / 100
	var errs [4]error
	var wg sync.WaitGroup
	for w := range errs {
		wg.Go(func() {
			for d := w; d < dirs && errs[w] == nil; d += len(errs) {
				sub := filepath.Join(dir, fmt.Sprintf(dirFormat, d))
				if errs[w] = os.MkdirAll(sub, 0o755); errs[w] != nil {
					return
				}
				for i := d * 100; i < min(n, d*100+100) && errs[w] == nil; i++ {
					errs[w] = os.WriteFile(filepath.Join(sub, fmt.Sprintf(fileFormat, i)), data(i), 0o644)
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		t.Fatal(err)
	}
}

// TestHandBackOfAnUnchangedLargeWorkspaceReadsNothing hands back an unchanged workspace of
// exactly MaxFiles files and checks it opened and read no file's content (the manifest's
// stat proves every one unchanged); then one file more is refused, naming the shared mode.
// It takes seconds, so -short skips it.
func TestHandBackOfAnUnchangedLargeWorkspaceReadsNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and copies 100,000 files; run without -short")
	}
	dir := t.TempDir()
	parent := filepath.Join(dir, "parent")
	writeMany(t, parent, MaxFiles)
	state := filepath.Join(dir, "state")
	res := mustCreate(t, parent, state, "big")
	if res.Files != MaxFiles {
		t.Fatalf("copied %d files", res.Files)
	}
	var opened, read atomic.Int64
	out, err := HandBack(context.Background(), res.Path(), HandBackOptions{read: func(name string, n int) {
		if n == 0 {
			opened.Add(1)
		}
		read.Add(int64(n))
	}})
	if err != nil {
		t.Fatal(err)
	}
	if opened.Load() != 0 || read.Load() != 0 {
		t.Fatalf("an unchanged hand-back opened %d files and read %d bytes", opened.Load(), read.Load())
	}
	if out.Unchanged != MaxFiles || len(out.Taken)+len(out.Removed)+len(out.Conflicts) != 0 {
		t.Fatalf("outcome: %d unchanged, %d taken, %d removed, %d conflicts", out.Unchanged, len(out.Taken), len(out.Removed), len(out.Conflicts))
	}
	if err := os.WriteFile(filepath.Join(parent, "one-more"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Create(context.Background(), parent, CreateOptions{State: state, ID: "too-big", Logger: quiet()})
	if !errors.Is(err, ErrTooManyFiles) {
		t.Fatalf("100,001 files: %v, want ErrTooManyFiles", err)
	}
}

// TestHandBackReadsOnlyWhatChanged is the small sibling of the test above: with a few
// files rewritten in place (new stat, same size), only those are read.
func TestHandBackReadsOnlyWhatChanged(t *testing.T) {
	dir := t.TempDir()
	parent := filepath.Join(dir, "parent")
	writeMany(t, parent, 300)
	res := mustCreate(t, parent, filepath.Join(dir, "state"), "c")
	// Same size, new content: must be read to be told apart; a bigger file need not be.
	os.WriteFile(filepath.Join(res.Path(), "d000", "f00001"), []byte("X"), 0o644)
	os.WriteFile(filepath.Join(res.Path(), "d001", "f00100"), []byte("a longer content"), 0o644)
	opened := map[string]int{}
	out, err := HandBack(context.Background(), res.Path(), HandBackOptions{NoSync: true, read: func(name string, n int) {
		if n == 0 {
			opened[filepath.Base(name)]++
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Taken) != 2 {
		t.Fatalf("taken %v", out.Taken)
	}
	for name := range opened {
		if name != "f00001" && name != "f00100" {
			t.Fatalf("opened %s, which did not change", name)
		}
	}
}
