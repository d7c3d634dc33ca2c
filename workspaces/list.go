package workspaces

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kennel-dev/kennel/ignore"
)

// listParent returns the relative slash paths Create copies from parent, sorted: in a
// git work tree what `git ls-files -co --exclude-standard -z` prints (tracked files and
// untracked files git does not ignore), else the files and symlinks that the tree's
// .gitignore files do not ignore (ignore.Walk). It never lists .git or anything under it.
// More than limit paths fail with a *TooManyFilesError.
func listParent(ctx context.Context, parent string, limit int) ([]string, bool, error) {
	if inGitWorkTree(ctx, parent) {
		paths, err := gitFiles(ctx, parent, limit)
		return paths, true, err
	}
	var paths []string
	err := ignore.Walk(ctx, parent, func(rel string, d fs.DirEntry) error {
		if d.IsDir() {
			return nil
		}
		if len(paths) == limit {
			return &TooManyFilesError{Parent: parent, Limit: limit}
		}
		paths = append(paths, rel)
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("list %s: %w", parent, err)
	}
	slices.Sort(paths)
	return paths, false, nil
}

// inGitWorkTree reports whether dir is inside a git work tree (and git runs). Without a
// ".git" in dir or above it (and no GIT_DIR or GIT_WORK_TREE), git is not asked.
func inGitWorkTree(ctx context.Context, dir string) bool {
	if os.Getenv("GIT_DIR") == "" && os.Getenv("GIT_WORK_TREE") == "" {
		found := false
		for d := dir; ; d = filepath.Dir(d) {
			if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
				found = true
				break
			}
			if filepath.Dir(d) == d {
				break
			}
		}
		if !found {
			return false
		}
	}
	out, err := exec.CommandContext(ctx, "git", "-C", dir, "rev-parse", "--is-inside-work-tree").Output()
	return err == nil && strings.TrimSpace(string(out)) == "true"
}

// gitFiles lists dir's tracked and untracked-not-ignored files with git. Entries git
// prints that are directories (an untracked nested repository, a submodule) or that lie
// under .git are left out.
func gitFiles(ctx context.Context, dir string, limit int) ([]string, error) {
	cmd := exec.CommandContext(ctx, "git", "-C", dir, "ls-files", "-co", "--exclude-standard", "-z")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		return nil, fmt.Errorf("list %s: git ls-files: %w: %s", dir, err, msg[:min(len(msg), 512)])
	}
	var paths []string
	for raw := range bytes.SplitSeq(out, []byte{0}) {
		p := string(raw)
		if p == "" || strings.HasSuffix(p, "/") || safeRel(p) != nil {
			continue
		}
		paths = append(paths, p)
	}
	slices.Sort(paths)
	paths = slices.Compact(paths)
	if len(paths) > limit {
		return nil, fmt.Errorf("list %s: %w", dir, &TooManyFilesError{Parent: dir, Limit: limit})
	}
	return paths, nil
}
