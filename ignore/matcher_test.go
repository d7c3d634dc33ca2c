package ignore

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Matcher is the tests' second implementation of the rules (next to Walk and
// git itself): it answers whether paths in one tree are ignored by the tree's
// .gitignore files, as git would decide for an untracked file: nested
// .gitignore files each apply to their own directory and below, deeper and
// later patterns win, '!' re-includes, and nothing inside an ignored
// directory can be re-included. Only .gitignore files count: not
// .git/info/exclude, core.excludesFile or any global excludes.
//
// Each directory's .gitignore is read the first time a path below it is
// asked about, then kept: later edits to it are not seen. A .gitignore that
// cannot be read, is not a regular file (a symlink is not followed) or is
// larger than MaxFileSize counts as empty. A Matcher is safe for concurrent use.
type Matcher struct {
	root string

	mu   sync.Mutex
	dirs map[string]*rules // by slash-separated directory path; "" is root
}

// New returns a Matcher for the tree at root. It reads nothing until asked.
func New(root string) *Matcher {
	return &Matcher{root: root, dirs: make(map[string]*rules)}
}

// Ignored reports whether rel, a slash-separated path relative to the root,
// is ignored: it or one of its parent directories is matched by the
// .gitignore files above it, or one of its components is ".git". isDir says
// whether rel itself is a directory (a symlink is not; "dir/" patterns
// match directories only). The root itself ("" or "."), and a path that
// leaves the tree ("../x", "/x"), are not ignored.
func (m *Matcher) Ignored(rel string, isDir bool) bool {
	if rel == "" || strings.HasPrefix(rel, "/") {
		return false
	}
	rel = path.Clean(rel)
	if rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return false
	}
	comps := strings.Split(rel, "/")
	offs := make([]int, len(comps))
	for i := 1; i < len(comps); i++ {
		offs[i] = offs[i-1] + len(comps[i-1]) + 1
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var r *rules
	for i, name := range comps {
		if name == ".git" {
			return true
		}
		r = m.rulesLocked(r, comps[:i])
		last := i == len(comps)-1
		if r.ignored(rel[:offs[i]+len(name)], offs[:i+1], isDir || !last) {
			return true
		}
	}
	return false
}

// rulesLocked returns the rules in force inside directory dir, whose
// parent's rules are parent (nil for the root), reading its .gitignore if
// it has not been read yet. m.mu must be held.
func (m *Matcher) rulesLocked(parent *rules, dir []string) *rules {
	key := strings.Join(dir, "/")
	if r, ok := m.dirs[key]; ok {
		return r
	}
	r := &rules{parent: parent, depth: len(dir), patterns: m.readRules(dir)}
	m.dirs[key] = r
	return r
}

// readRules reads the .gitignore of dir, opening each component relative
// to its parent without following symlinks (a symlink or a missing
// directory on the way has no .gitignore). Read errors count as no
// patterns.
func (m *Matcher) readRules(dir []string) []pattern {
	f, err := os.OpenFile(m.root, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil
	}
	for _, name := range dir {
		child, err := openDirAt(int(f.Fd()), name, filepath.Join(f.Name(), name))
		f.Close()
		if err != nil {
			return nil
		}
		f = child
	}
	defer f.Close()
	ps, _ := readIgnoreAt(int(f.Fd()), f.Name())
	return ps
}
