package workspaces

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// writeEntry puts e at rel under root (its directories must exist).
func writeEntry(t tb, root, rel string, e Entry) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(rel))
	var err error
	switch e.Kind {
	case KindFile:
		if err = os.WriteFile(p, []byte(e.Content), 0o600); err == nil {
			err = os.Chmod(p, e.Mode)
		}
	case KindSymlink:
		err = os.Symlink(e.Content, p)
	case KindDir:
		err = os.Mkdir(p, 0o755)
		if errors.Is(err, fs.ErrExist) {
			err = nil
		}
	}
	if err != nil {
		t.Fatalf("write %s: %v", rel, err)
	}
}

// writeTree makes l under root (which exists).
func writeTree(t tb, root string, l Listing) {
	t.Helper()
	for _, p := range slices.Sorted(maps.Keys(l)) {
		writeEntry(t, root, p, l[p])
	}
}

// readTree reads the tree under root as a Listing with real contents, skipping names
// skip says.
func readTree(t tb, root string) Listing {
	t.Helper()
	l := Listing{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			l[rel] = Entry{Kind: KindDir}
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			l[rel] = Entry{Kind: KindSymlink, Content: target}
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			l[rel] = Entry{Kind: KindFile, Mode: info.Mode().Perm(), Content: string(data)}
		default:
			l[rel] = Entry{Kind: KindOther, Content: "other"}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read tree %s: %v", root, err)
	}
	return l
}

// readBase reads a workspace's base as a Listing: the files and symlinks of base/, and
// each file the manifest keeps as a digest, with want's entry (private, as base/ has it)
// when want's content has that digest, else a content that names the digest.
func readBase(t tb, ws *Workspace, want Listing) Listing {
	t.Helper()
	l := readTree(t, ws.Base())
	m, err := readManifest(filepath.Join(ws.Dir, manifestName))
	if err != nil {
		t.Fatalf("%v", err)
	}
	for _, e := range m.entries {
		if !e.HasDigest {
			continue
		}
		if _, ok := l[e.Path]; ok {
			t.Fatalf("%s is both in base/ and a digest", e.Path)
		}
		w, ok := want[e.Path]
		if ok && w.Kind == KindFile && sha256.Sum256([]byte(w.Content)) == e.Digest && e.Size == int64(len(w.Content)) {
			l[e.Path] = Entry{Kind: KindFile, Mode: 0o600, Content: w.Content}
		} else {
			l[e.Path] = Entry{Kind: KindFile, Mode: 0o600, Content: "digest " + hex.EncodeToString(e.Digest[:])}
		}
	}
	// base/ has the directories of its files only; want's directories are the copy's.
	for p, e := range want {
		if e.Kind == KindDir {
			l[p] = e
		}
	}
	return l
}

// syncTree changes the tree under root from `from` to `to`, touching only the paths that
// differ (so unchanged files keep their stat), and rewriting in place the files touch
// names (same content, new stat).
func syncTree(t tb, root string, from, to Listing, touch map[string]bool) {
	t.Helper()
	abs := func(rel string) string { return filepath.Join(root, filepath.FromSlash(rel)) }
	// Removals, deepest first.
	for _, p := range slices.Backward(slices.Sorted(maps.Keys(from))) {
		f := from[p]
		e, ok := to[p]
		if ok && same(&f, &e) && (f.Kind != KindFile || !touch[p]) {
			continue
		}
		if f.Kind == KindDir && ok && e.Kind == KindDir {
			continue
		}
		if err := os.RemoveAll(abs(p)); err != nil {
			t.Fatalf("sync %s: %v", p, err)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(to)) {
		e := to[p]
		if f, ok := from[p]; ok && same(&f, &e) && (f.Kind != KindFile || !touch[p]) {
			if _, err := os.Lstat(abs(p)); err == nil {
				continue
			}
		}
		if _, err := os.Lstat(abs(p)); err == nil && e.Kind == KindDir {
			continue
		}
		writeEntry(t, root, p, e)
	}
}

// quiet is a logger that drops everything, for tests that do not look at warnings.
func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// mustCreate creates a workspace for parent under state.
func mustCreate(t tb, parent, state, id string) *CreateResult {
	t.Helper()
	res, err := Create(context.Background(), parent, CreateOptions{State: state, ID: id, Logger: quiet()})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return res
}

// conflictsOf returns the conflicts of an outcome as "path:reason" strings.
func conflictsOf(o *Outcome) []string {
	var out []string
	for _, c := range o.Conflicts {
		out = append(out, c.Path+":"+string(c.Reason))
	}
	return out
}

// mkfifo makes a named pipe at p.
func mkfifo(p string) error { return unix.Mkfifo(p, 0o644) }
