package workspaces

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// HandBackOptions configures HandBack. The zero value of each optional field is documented.
type HandBackOptions struct {
	// Stop ends the child before its changes are taken: its session, kernel and jobs end,
	// so nothing writes into the copy any more. It is called once per run until a record
	// exists, never after. Nil: the caller has stopped the child already.
	Stop func(ctx context.Context) error
	// Step, when not nil, is called before and after every change a hand-back makes to
	// the parent, before its record, and before each step that retires the workspace
	// after the record ("save <path>", "remove <path>", "removed <path>", "rename <path>",
	// "renamed <path>", "record", "trash base", "trash work", "link work"). An error it
	// returns ends the run at once, as a crash there would: a test hook for cut
	// hand-backs.
	Step func(name string) error
	// Sweeper, when not nil, removes the base and the child's copy in the background once
	// they are in the workspace's trash/ (and any trash earlier hand-backs under the same
	// state directory left): HandBack returns as soon as its record is written and the
	// child's directory is a link, and Sweeper.Wait waits for the removal. Nil: HandBack
	// removes them before it returns.
	Sweeper *Sweeper
	// Progress, when not nil, is called from another goroutine every 100 ms or so, and once
	// at the end. It must not block.
	Progress func(Progress)
	// NoSync skips syncing the parent's file system and the record before the record is
	// trusted. A process crash is survived either way (every step is a rename or an
	// unlink); a power loss without the sync may leave a record whose changes the disk
	// lost. False: sync (costs a syncfs, tens of ms on a busy disk).
	NoSync bool

	// read, when not nil, is told of every open (n == 0) and read of file content. Tests
	// use it to check what a hand-back reads.
	read func(name string, n int)
}

// Outcome is the record of a finished hand-back, kept as the workspace's handback.json.
type Outcome struct {
	// ID and Parent name the workspace and the directory the changes went to.
	ID     string `json:"id"`
	Parent string `json:"parent"`
	// Unchanged counts the base's files and symlinks the child did not change.
	Unchanged int `json:"unchanged"`
	// Taken lists the paths whose child file or symlink is now the parent's (a path both
	// changed to the same content is listed too: this is what makes a rerun after a cut
	// record the same).
	Taken []string `json:"taken"`
	// Removed lists the paths the child removed that are gone from the parent.
	Removed []string `json:"removed"`
	// Conflicts lists the paths where the parent's entry was kept against the child's.
	Conflicts []Conflict `json:"conflicts"`
	// Repeat is true when this outcome was read from the record of an earlier run.
	Repeat bool `json:"-"`
}

// Conflict is one path where the parent's entry was kept against the child's change.
type Conflict struct {
	// Path is the slash path relative to the parent.
	Path string `json:"path"`
	// Reason says why the child's change was not taken.
	Reason Reason `json:"reason"`
	// Saved is the absolute path of the child's version under the workspace's conflicts/
	// directory; empty when the child removed the path or made a special file there.
	Saved string `json:"saved,omitempty"`
}

// HandBack brings a child's changes back into its parent directory and ends the
// workspace. dir is the workspace directory or the child's working directory.
//
// First opts.Stop ends the child. Then each path the child changed is decided by Plan and
// carried out: a file or symlink is put in place by one rename from a copy beside it named
// ".<name>.kennel-handback" (the same name in every run, so a rerun removes a copy a crash
// left), a removal by one unlink; the child's version of each conflict is saved under
// conflicts/. The record, handback.json (written atomically), ends the hand-back; then
// the base and the child's copy are moved into the workspace's trash/ (one rename each),
// the child's directory becomes a symlink to the parent, and trash/ is removed: before
// HandBack returns, or in the background with opts.Sweeper. A process that ends before
// that removal leaves trash/ (never a half-removed base), and the next Create or HandBack
// under the same state directory removes it; HandBack also removes such leftovers before
// it starts.
//
// A hand-back cut anywhere (a crash, an error) reruns from the start to the same parent
// tree and record. A call after the record returns the recorded outcome (Repeat set) and
// does not call Stop. A failed hand-back returns the error and leaves the copy in place.
func HandBack(ctx context.Context, dir string, opts HandBackOptions) (*Outcome, error) {
	ws, err := Open(dir)
	if err != nil {
		return nil, fmt.Errorf("hand back %s: %w", dir, err)
	}
	lock, err := os.OpenFile(filepath.Join(ws.Dir, lockName), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("hand back %s: %w", ws.Dir, err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return nil, fmt.Errorf("hand back %s: lock: %w", ws.Dir, err)
	}
	sweepLeftovers(ctx, ws.Dir, opts.Sweeper) // errors: from opts.Sweeper.Wait, else a later sweep
	if out, err := readRecord(ws); err == nil {
		out.Repeat = true
		if err := retire(ctx, ws, &opts); err != nil {
			return nil, fmt.Errorf("hand back %s: %w", ws.Dir, err)
		}
		return out, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("hand back %s: %w", ws.Dir, err)
	}
	if opts.Stop != nil {
		if err := opts.Stop(ctx); err != nil {
			return nil, fmt.Errorf("hand back %s: stop the child: %w", ws.Dir, err)
		}
	}
	out, err := handBack(ctx, ws, &opts)
	if err != nil {
		return nil, fmt.Errorf("hand back %s: %w", ws.Dir, err)
	}
	if err := retire(ctx, ws, &opts); err != nil {
		return nil, fmt.Errorf("hand back %s: %w", ws.Dir, err)
	}
	return out, nil
}

// handBack plans and applies, then writes the record.
func handBack(ctx context.Context, ws *Workspace, opts *HandBackOptions) (*Outcome, error) {
	report := startProgress(opts.Progress, "scan")
	defer report.stop()
	man, err := readManifest(filepath.Join(ws.Dir, manifestName))
	if err != nil {
		return nil, err
	}
	s := &scanner{man: man, read: opts.read}
	for _, t := range []struct {
		r    **root
		path string
	}{{&s.base, ws.Base()}, {&s.work, ws.Path()}, {&s.parent, ws.Parent}} {
		r, err := openRoot(t.path)
		if err != nil {
			return nil, err
		}
		defer r.close()
		*t.r = r
	}
	if err := s.scanChild(ctx); err != nil {
		return nil, err
	}
	changed, err := s.labelChild()
	if err != nil {
		return nil, err
	}
	a := &applier{ws: ws, s: s, step: opts.Step, report: report}
	if err := a.sweep(changed); err != nil {
		return nil, err
	}
	if err := s.labelParent(changed); err != nil {
		return nil, err
	}
	m := Plan(s.baseL, s.parentL, s.childL)
	report.set("apply", len(m.Decisions))
	decisions, err := a.apply(ctx, m.Decisions)
	if err != nil {
		return nil, err
	}
	out := &Outcome{ID: ws.ID, Parent: ws.Parent, Unchanged: m.Unchanged, Taken: []string{}, Removed: []string{}, Conflicts: []Conflict{}}
	for _, d := range decisions {
		switch {
		case d.Action == ActionConflict:
			c := Conflict{Path: d.Path, Reason: d.Reason}
			if d.Child != nil && (d.Child.Kind == KindFile || d.Child.Kind == KindSymlink) {
				c.Saved = filepath.Join(ws.Conflicts(), filepath.FromSlash(d.Path))
			}
			out.Conflicts = append(out.Conflicts, c)
		case d.Child == nil:
			out.Removed = append(out.Removed, d.Path)
		default:
			out.Taken = append(out.Taken, d.Path)
		}
	}
	if err := a.stepf("record"); err != nil {
		return nil, err
	}
	if !opts.NoSync {
		// What the record says must be on disk before the record is.
		d, err := os.Open(ws.Parent)
		if err == nil {
			err = unix.Syncfs(int(d.Fd()))
			d.Close()
		}
		if err != nil {
			return nil, fmt.Errorf("sync the parent: %w", err)
		}
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeAtomic(filepath.Join(ws.Dir, recordName), append(data, '\n'), !opts.NoSync); err != nil {
		return nil, err
	}
	return out, nil
}

// readRecord reads the hand-back record of ws; fs.ErrNotExist when there is none.
func readRecord(ws *Workspace) (*Outcome, error) {
	data, err := os.ReadFile(filepath.Join(ws.Dir, recordName))
	if err != nil {
		return nil, err
	}
	var out Outcome
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("read %s: %w", recordName, err)
	}
	return &out, nil
}

// retire ends a recorded hand-back: the base and the child's copy go into trash/ with one
// rename each, the child's directory becomes a symlink to the parent, the manifest goes,
// and trash/ is removed (by opts.Sweeper in the background, else now). Each step is
// idempotent, so a retire cut by a crash is completed by the next call; a crash leaves
// the base either in place or in trash/, never half removed.
func retire(ctx context.Context, ws *Workspace, opts *HandBackOptions) error {
	if err := runStep(opts.Step, "trash base"); err != nil {
		return err
	}
	if err := toTrash(ws, baseName); err != nil {
		return err
	}
	work := ws.Path()
	linked := false
	if st, err := os.Lstat(work); err == nil && st.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(work)
		linked = err == nil && target == ws.Parent
	}
	if !linked {
		if err := runStep(opts.Step, "trash work"); err != nil {
			return err
		}
		if err := toTrash(ws, workName); err != nil {
			return err
		}
		if err := runStep(opts.Step, "link work"); err != nil {
			return err
		}
		tmp := work + ".link"
		if err := removeIfExists(tmp); err != nil {
			return err
		}
		if err := os.Symlink(ws.Parent, tmp); err != nil {
			return fmt.Errorf("link the child's directory: %w", err)
		}
		if err := os.Rename(tmp, work); err != nil {
			return fmt.Errorf("link the child's directory: %w", err)
		}
	}
	if err := removeIfExists(filepath.Join(ws.Dir, manifestName)); err != nil {
		return err
	}
	return opts.Sweeper.removeTrash(ctx, filepath.Join(ws.Dir, trashName), true)
}

// removeIfExists removes the file or empty directory name; a missing one is no error.
func removeIfExists(name string) error {
	if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
