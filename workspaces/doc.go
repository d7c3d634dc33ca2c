// Package workspaces gives a child agent an isolated copy of its parent's directory and
// brings the child's changes back, path by path, with a three-way rule.
//
// # Create
//
// Create copies the parent's tracked and untracked-not-ignored files (git ls-files in a
// git work tree; else the files the tree's own .gitignore files do not ignore, decided by
// package ignore) twice: the base, as the child found it, and the child's working copy.
// It never copies .git or an ignored directory; symlinks stay symlinks and modes are kept.
// Files are cloned with FICLONE where the file system shares extents (XFS, btrfs) and
// copied with copy_file_range elsewhere, with one warning that gives both counts. The
// copy goes directory by directory on several goroutines (CreateOptions.Workers): each
// parent file is opened once, by its name in its already-open directory, and cloned into
// the child's copy from that one descriptor (created with its final mode, it gets its
// times through its descriptor).
//
// The base exists to answer one question at the hand-back: does this entry still hold
// what the child found? For a file of at most CreateOptions.DigestMax (64 KiB) whose
// bytes are all in the page cache (cachestat(2), then a read that does not wait), the
// answer needs only their SHA-256, which goes into the manifest: reading a cached small
// file costs a fraction of making one, and most files of a source tree are small. Any
// other file, and every symlink, is copied into base/ (a clone where the file system can;
// bytes only, 0600, no times). A write to the parent's file during its copy shows in its
// stat and makes its base a copy. Over
// MaxFiles (100,000) files the copy is refused with a *TooManyFilesError that names the
// shared mode. The stat of every copied entry goes into the workspace's manifest, so a
// hand-back knows an untouched file without reading it.
//
// A workspace lives at <state>/workspaces/<ParentKey(parent)>/<id>/:
//
//	workspace.json  id, parent, creation time (0600)
//	manifest.json   every copied path with its stat in the parent and in the copy, and
//	                the base digest of a small cached file (0600)
//	base/           the rest of the parent as the child found it (private: files 0600)
//	work/           the child's copy, Workspace.Path; a symlink to the parent afterwards
//	conflicts/      the child's versions of the paths that conflicted
//	handback.json   the hand-back's record (0600); its presence means it is done
//	trash/          base/ and work/ after the record, until they are removed
//
// # Hand-back
//
// HandBack stops the child (HandBackOptions.Stop), lists the child's copy (its own
// .gitignore files only, plus every path the base had), and asks Plan what to do with
// each path the child changed:
//
//	child did not change it          the parent's content stays
//	only the child changed it        the child's content (or removal) is taken
//	both changed it the same way     kept
//	both changed it differently      the parent's content stays; a conflict; the child's
//	                                 version goes to conflicts/
//	the parent cannot hold it        (a directory there, or a file or symlink where one of
//	                                 its directories goes) the same as a conflict
//
// Plan is a pure function of three listings; the disk side only decides which entries are
// equal (by stat when the manifest proves a file untouched, by bytes or by the base's
// digest otherwise) and
// carries the plan out with one rename (from a copy beside the path) or one unlink per
// path. A hand-back cut at any point reruns from the start to the same tree and record.
//
// # Trash
//
// After the record, the base and the child's copy are moved into the workspace's trash/
// (one rename each, so a crash leaves each whole, in place or in trash/, never half
// removed) and the child's directory becomes a symlink to the parent. Removing them
// (2 x the files) costs more than the hand-back itself, so it is off the hand-back's
// path when a Sweeper is given: HandBack returns, the removal runs in the background, and
// Sweeper.Wait waits for it. A Sweeper with Defer removes nothing and names the trash
// directories instead (Sweeper.Deferred), for a process that outlives the caller to remove
// with RemoveTrash: the CLI prints the outcome, hands them to a detached
// `kennel workspace sweep` and exits. Without a Sweeper HandBack removes trash/ before it
// returns. A trash/ a process left behind (it ended
// first) is removed by the next Create or HandBack under the same state directory. Each
// remover holds an flock on the trash directory, so two processes do not both do the
// work; a removal never follows a symlink and makes read-only directories of the copy
// writable through their own descriptors.
//
// Races: the child must be stopped before its hand-back; the parent may change while a
// hand-back runs, and a path it changes between the scan and its rename can be replaced
// (each path is checked again just before its rename, which narrows but does not close
// that window). Paths inside the child's copy are resolved with openat2 and
// RESOLVE_NO_SYMLINKS, so a symlink the child planted never leads a read outside it.
//
// Example, as a controller would use it:
//
//	res, err := workspaces.Create(ctx, "/home/me/project", workspaces.CreateOptions{State: state, ID: "child-1"})
//	if err != nil {
//		return err // errors.Is(err, workspaces.ErrTooManyFiles): use the shared mode
//	}
//	// ... run the child's kernel in res.Path() ...
//	var sweeper workspaces.Sweeper // one for the process; Wait before it exits
//	out, err := workspaces.HandBack(ctx, res.Dir, workspaces.HandBackOptions{Stop: session.Stop, Sweeper: &sweeper})
//	if err != nil {
//		return err // the copy stays; a later HandBack resumes
//	}
//	for _, c := range out.Conflicts {
//		log.Printf("conflict %s (%s): the child's version is at %s", c.Path, c.Reason, c.Saved)
//	}
//	return sweeper.Wait(ctx) // the base and the copy are gone
package workspaces
