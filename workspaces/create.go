package workspaces

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// CreateOptions configures Create. The zero value of each optional field is documented.
type CreateOptions struct {
	// State is kennel's state directory; the workspace goes under State/workspaces.
	// Required.
	State string
	// ID names the workspace among its parent's (see ValidID). Empty: a random id.
	ID string
	// MaxFiles is the most files a copy takes. Zero: MaxFiles (100,000).
	MaxFiles int
	// Workers is the number of directories copied at once. Zero: 8 (clones of files in
	// different directories run concurrently in the file system).
	Workers int
	// DigestMax is the size of the largest file whose base is kept as the SHA-256 of
	// its bytes (in the manifest) instead of a second copy, when all its bytes are in the
	// page cache: a hand-back needs the base only to tell whether an entry still holds
	// what the child found, and a digest of a small cached file costs a fraction of a
	// file's creation. Zero: DefaultDigestMax; negative: every base file is a copy. At
	// most MaxDigestMax.
	DigestMax int64
	// Logger receives the one warning of a copy that could not clone. Nil: slog.Default().
	Logger *slog.Logger
	// Progress, when not nil, is called from another goroutine every 100 ms or so while
	// files are copied, and once at the end. It must not block.
	Progress func(Progress)
	// Sweeper, when not nil, removes in the background the trash that earlier hand-backs
	// under the same state directory left (a process that ended before its removal
	// did); Sweeper.Wait waits for it and returns its errors. Nil: Create removes it
	// before it returns, and a leftover it cannot remove stays for a later sweep.
	Sweeper *Sweeper
}

// DefaultDigestMax and MaxDigestMax bound CreateOptions.DigestMax.
const (
	DefaultDigestMax = 64 << 10
	MaxDigestMax     = 1 << 20
)

// Progress says how far a Create or HandBack is.
type Progress struct {
	// Phase is "list", "copy", "scan" or "apply".
	Phase string
	// Done and Total count the phase's paths; Total is 0 while unknown.
	Done, Total int
}

// CreateResult describes a created workspace and how its copy was made.
type CreateResult struct {
	Workspace
	// Git reports whether git listed the parent's files (else the .gitignore walk did).
	Git bool
	// Files and Symlinks count the copied paths (each in the base and the child's copy).
	Files, Symlinks int
	// Cloned and Copied count the file copies made by sharing extents (FICLONE) and by
	// copying bytes: one per file for the child's copy, one more for each file whose
	// base is a copy.
	Cloned, Copied int
	// Digested counts the files whose base is the SHA-256 of their bytes (see
	// CreateOptions.DigestMax).
	Digested int
	// Bytes is the total size of the copied files (once).
	Bytes int64
}

// Create makes an isolated workspace for a child of the parent directory: its tracked
// and untracked-not-ignored files (listed by git in a work tree, else by the tree's
// .gitignore files), twice: the base (as the child found it) and the child's working copy
// (Workspace.Path). It never copies .git or an ignored directory; symlinks are copied as
// symlinks and file modes are kept. Files are cloned (FICLONE) where the file system can,
// else copied, and a copy that copied any bytes logs one warning with both counts. The
// base of a small file whose bytes are cached is their SHA-256 (opts.DigestMax). Each
// copied entry's stat is recorded in the workspace's manifest (mode 0600), so a hand-back
// tells unchanged files without reading them.
//
// More than opts.MaxFiles files fail with a *TooManyFilesError (ErrTooManyFiles) that names
// the shared mode; a taken id fails with ErrExists. A failed Create leaves nothing behind.
func Create(ctx context.Context, parent string, opts CreateOptions) (*CreateResult, error) {
	if opts.State == "" {
		return nil, errors.New("create workspace: no state directory")
	}
	if opts.ID == "" {
		var b [6]byte
		rand.Read(b[:])
		opts.ID = hex.EncodeToString(b[:])
	}
	if err := ValidID(opts.ID); err != nil {
		return nil, fmt.Errorf("create workspace: %w", err)
	}
	if opts.MaxFiles <= 0 {
		opts.MaxFiles = MaxFiles
	}
	if opts.Workers <= 0 {
		opts.Workers = 8
	}
	switch {
	case opts.DigestMax == 0:
		opts.DigestMax = DefaultDigestMax
	case opts.DigestMax > MaxDigestMax:
		return nil, fmt.Errorf("create workspace: DigestMax %d is over %d", opts.DigestMax, MaxDigestMax)
	}
	opts.Logger = cmp.Or(opts.Logger, slog.Default())
	abs, err := filepath.Abs(parent)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return nil, fmt.Errorf("create workspace %s: %w", parent, err)
	}
	if st, err := os.Stat(abs); err != nil {
		return nil, fmt.Errorf("create workspace %s: %w", parent, err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("create workspace %s: %w", parent, ErrNotDirectory)
	}
	state, err := filepath.Abs(opts.State)
	if err != nil {
		return nil, fmt.Errorf("create workspace %s: %w", parent, err)
	}
	group := filepath.Join(state, "workspaces", ParentKey(abs))
	if err := os.MkdirAll(group, 0o700); err != nil {
		return nil, fmt.Errorf("create workspace %s: %w", parent, err)
	}
	dir := filepath.Join(group, opts.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			err = ErrExists
		}
		return nil, fmt.Errorf("create workspace %s: %s: %w", parent, opts.ID, err)
	}
	res := &CreateResult{Workspace: Workspace{ID: opts.ID, Parent: abs, Dir: dir}}
	if err := create(ctx, res, opts); err != nil {
		removeTree(dir)
		return nil, fmt.Errorf("create workspace %s: %w", parent, err)
	}
	sweepLeftovers(ctx, dir, opts.Sweeper) // errors: from opts.Sweeper.Wait, else a later sweep
	return res, nil
}

// create fills the claimed workspace directory res.Dir.
func create(ctx context.Context, res *CreateResult, opts CreateOptions) error {
	report := startProgress(opts.Progress, "list")
	defer report.stop()
	paths, git, err := listParent(ctx, res.Parent, opts.MaxFiles)
	if err != nil {
		return err
	}
	res.Git = git
	// Workspaces inside the parent (a state directory there) are never copied.
	if rel, err := filepath.Rel(res.Parent, filepath.Dir(filepath.Dir(res.Dir))); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		prefix := filepath.ToSlash(rel) + "/"
		paths = slices.DeleteFunc(paths, func(p string) bool { return rel == "." || strings.HasPrefix(p, prefix) })
	}
	src, err := openRoot(res.Parent)
	if err != nil {
		return err
	}
	defer src.close()
	c, err := newCopier(src, res.Dir, paths, opts.Workers, opts.DigestMax, report)
	if err != nil {
		return err
	}
	defer c.close()
	if err := c.makeDirs(); err != nil {
		return err
	}

	start, err := fsClock(res.Dir)
	if err != nil {
		return err
	}

	report.set("copy", len(paths))
	if err := c.copyFiles(ctx); err != nil {
		return err
	}
	var m []mentry
	for i, e := range c.entries {
		if !c.kept[i] {
			continue
		}
		m = append(m, e)
		if e.Kind == KindFile {
			res.Files++
			res.Bytes += e.Size
		} else {
			res.Symlinks++
		}
	}
	res.Cloned, res.Copied, res.Digested = int(c.cloned.Load()), int(c.copied.Load()), int(c.digested.Load())
	if err := c.setDirModes(); err != nil {
		return err
	}
	var newest int64
	for _, e := range m {
		newest = max(newest, e.Child.Ctime)
	}
	end, err := fsClockAfter(ctx, res.Dir, newest)
	if err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(res.Dir, manifestName), encodeManifest(start, end, m), false); err != nil {
		return err
	}
	res.Created = time.Now().UTC()
	data, _ := json.Marshal(info{Version: 1, ID: res.ID, Parent: res.Parent, Created: res.Created})
	if err := writeAtomic(filepath.Join(res.Dir, infoName), data, false); err != nil {
		return err
	}
	if res.Copied > 0 {
		opts.Logger.Warn("workspace copy: the file system could not clone; bytes were copied",
			"parent", res.Parent, "workspace", res.Dir, "cloned", res.Cloned, "copied", res.Copied)
	}
	return nil
}

// fsClock reads the file system's clock in dir: the ctime of a file made there.
func fsClock(dir string) (int64, error) {
	name := filepath.Join(dir, ".clock")
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return 0, fmt.Errorf("read the file-system clock: %w", err)
	}
	defer os.Remove(name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, fmt.Errorf("read the file-system clock: %w", err)
	}
	return st.Ctim.Nano(), nil
}

// fsClockAfter waits until the file system's clock in dir reads later than t (a tick or
// so) and returns that reading. After a second (a clock set back) it returns what it
// reads: entries not older than that reading are then compared by content.
func fsClockAfter(ctx context.Context, dir string, t int64) (int64, error) {
	deadline := time.Now().Add(time.Second)
	for {
		now, err := fsClock(dir)
		if err != nil || now > t || time.Now().After(deadline) {
			return now, err
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}
