package output

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestPruneRemovesOnlyOldOutputFiles(t *testing.T) {
	dir := privateTempDir(t)
	old := time.Now().Add(-SpillKeep - time.Hour)
	files := map[string]bool{ // name -> pruned
		"kennel-spill-1":      true,
		"kennel-output-2":     true,
		"kennel-spill-fresh":  false,
		"notes.txt":           false,
		"kennel-spill-subdir": false, // a directory
		"kennel-spill-link":   false, // a symlink to an old file
	}
	for name := range files {
		p := filepath.Join(dir, name)
		var err error
		switch name {
		case "kennel-spill-subdir":
			err = os.Mkdir(p, 0o700)
		case "kennel-spill-link":
			err = os.Symlink(filepath.Join(dir, "notes.txt"), p)
		default:
			err = os.WriteFile(p, []byte(name), 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for name := range files {
		if name != "kennel-spill-fresh" && name != "kennel-spill-link" {
			if err := os.Chtimes(filepath.Join(dir, name), old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	n, err := Prune(context.Background(), dir, SpillKeep)
	if err != nil || n != 2 {
		t.Fatalf("Prune = %d, %v; want 2", n, err)
	}
	for name, pruned := range files {
		_, err := os.Lstat(filepath.Join(dir, name))
		if gone := os.IsNotExist(err); gone != pruned {
			t.Errorf("%s: gone=%v, want %v", name, gone, pruned)
		}
	}
	if n, err := Prune(context.Background(), filepath.Join(dir, "missing"), SpillKeep); n != 0 || err != nil {
		t.Fatalf("Prune of a missing dir = %d, %v", n, err)
	}
}

// TestPruneKeepsALiveSpill checks a running capture's spill file survives a prune.
func TestPruneKeepsALiveSpill(t *testing.T) {
	dir := privateTempDir(t)
	c := newCapture(t, CaptureOptions{SpillDir: dir, PrefixBytes: 4})
	writeAll(t, c, []byte("0123456789"))
	if n, err := Prune(context.Background(), dir, SpillKeep); n != 0 || err != nil {
		t.Fatalf("Prune = %d, %v", n, err)
	}
	if page, err := c.ReadPage(0, 10); err != nil || string(page.Data) != "0123456789" {
		t.Fatalf("read after prune = %q, %v", page.Data, err)
	}
}
