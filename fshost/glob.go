package fshost

import (
	"cmp"
	"context"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/kennel-dev/kennel/fshost/fsroot"
)

// GlobArgs are the arguments of fs.glob.
type GlobArgs struct {
	// Pattern is a "/"-separated glob: "*", "?" and "[...]" within a name (path.Match),
	// and "**" as a whole segment for any number of directories (none included). A
	// relative pattern is matched below Path; an absolute one is a sandbox path whose
	// leading plain segments name the directory to search. Required.
	Pattern string `json:"pattern"`
	// Path is the directory to search; "" means Cwd.
	Path string `json:"path"`
	// Cwd is the request's working directory (a sandbox path); "" means the session's.
	Cwd string `json:"cwd"`
}

// GlobResult is the reply of fs.glob.
type GlobResult struct {
	// Paths are the sandbox paths of the entries that match (not directories), sorted,
	// at most GlobMaxResults of them.
	Paths []string `json:"paths"`
	// Truncated reports that more entries matched.
	Truncated bool `json:"truncated"`
}

// globCollectMax bounds how many matches fs.glob collects before sorting.
const globCollectMax = 100_000

// Glob serves fs.glob. The tree is listed by the Root's WalkDir (skipping .git and
// what .gitignore files ignore; never following symlinks), directories that
// cannot hold a match are not entered, and the matching entries come back as sorted
// sandbox paths.
func (s *Server) Glob(ctx context.Context, a GlobArgs) (*GlobResult, error) {
	const op = TypeGlob
	if a.Pattern == "" {
		return nil, fail(op, "", fsroot.ErrInvalid, "pattern is required")
	}
	base, pattern := cmp.Or(a.Path, "."), a.Pattern
	if strings.HasPrefix(pattern, "/") {
		segs := strings.Split(strings.Trim(pattern, "/"), "/")
		i := 0
		for i < len(segs)-1 && !hasMeta(segs[i]) {
			i++
		}
		base, pattern = "/"+strings.Join(segs[:i], "/"), strings.Join(segs[i:], "/")
	}
	g, err := compileGlob(pattern)
	if err != nil {
		return nil, fail(op, "", fsroot.ErrInvalid, "pattern: %v", err)
	}
	dir, err := s.root.Stat(ctx, a.Cwd, base)
	if err != nil {
		return nil, err
	}
	if !dir.IsDir() {
		if !dir.Exists {
			return nil, fail(op, dir.Path, fsroot.ErrNotFound, "")
		}
		return nil, fail(op, dir.Path, fsroot.ErrInvalid, "not a directory")
	}
	res := &GlobResult{Paths: []string{}}
	states := &stateCache{g: g, dirs: map[string]globState{"": g.start()}}
	err = s.root.WalkDir(ctx, a.Cwd, dir.Path, func(e fsroot.Entry) error {
		st := g.step(states.of(parentRel(e.Rel)), path.Base(e.Rel))
		if e.Type.IsDir() {
			if !g.canDescend(st) {
				return fs.SkipDir
			}
			states.dirs[e.Rel] = st
			return nil
		}
		if g.matches(st) {
			if len(res.Paths) == globCollectMax {
				res.Truncated = true
				return fs.SkipAll
			}
			res.Paths = append(res.Paths, e.Path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(res.Paths)
	if len(res.Paths) > s.opts.GlobMaxResults {
		res.Paths, res.Truncated = res.Paths[:s.opts.GlobMaxResults], true
	}
	return res, nil
}

// parentRel returns the parent of a slash-separated relative path ("" for a top entry).
func parentRel(rel string) string {
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		return rel[:i]
	}
	return ""
}

// hasMeta reports whether a glob segment has a special character.
func hasMeta(seg string) bool { return strings.ContainsAny(seg, `*?[\`) }

// globPattern is a compiled glob: its segments, "**" standing for any number of path
// components. Matching runs a set of positions in the pattern over the components of a
// path, so no pattern (however many "**") costs more than segments × components.
type globPattern struct {
	segs []string
}

// compileGlob checks and splits a relative glob. "." segments are dropped, repeated
// "**" merged; ".." is refused, as is a malformed segment.
func compileGlob(p string) (*globPattern, error) {
	if len(p) > fsroot.MaxPath {
		return nil, errPattern("too long")
	}
	g := &globPattern{}
	for _, seg := range strings.Split(p, "/") {
		switch {
		case seg == "" || seg == ".":
			continue
		case seg == "..":
			return nil, errPattern(`".." in a pattern`)
		case seg == "**":
			if len(g.segs) > 0 && g.segs[len(g.segs)-1] == "**" {
				continue
			}
		default:
			if _, err := path.Match(seg, ""); err != nil {
				return nil, errPattern("bad segment")
			}
		}
		g.segs = append(g.segs, seg)
	}
	if len(g.segs) == 0 {
		return nil, errPattern("empty")
	}
	return g, nil
}

type errPattern string

func (e errPattern) Error() string { return string(e) }

// globState is a set of positions in the pattern: position i means segs[:i] matched.
type globState []bool

// start is the state before any component.
func (g *globPattern) start() globState {
	st := make(globState, len(g.segs)+1)
	st[0] = true
	g.closure(st)
	return st
}

// closure adds the positions after a "**" that may match nothing.
func (g *globPattern) closure(st globState) {
	for i, seg := range g.segs {
		if st[i] && seg == "**" {
			st[i+1] = true
		}
	}
}

// step returns the state after one more component named name.
func (g *globPattern) step(st globState, name string) globState {
	next := make(globState, len(st))
	for i, seg := range g.segs {
		if !st[i] {
			continue
		}
		if seg == "**" {
			next[i] = true
		} else if ok, _ := path.Match(seg, name); ok {
			next[i+1] = true
		}
	}
	g.closure(next)
	return next
}

// matches reports whether the whole pattern matched.
func (g *globPattern) matches(st globState) bool { return st[len(g.segs)] }

// canDescend reports whether a path below the one st describes can still match.
func (g *globPattern) canDescend(st globState) bool { return slices.Contains(st[:len(g.segs)], true) }

// matchPath matches a slash-separated relative path.
func (g *globPattern) matchPath(rel string) bool {
	st := g.start()
	for _, c := range strings.Split(rel, "/") {
		st = g.step(st, c)
	}
	return g.matches(st)
}

// stateCache remembers the state of each directory walked (a walk lists a directory
// before its entries); a directory not seen (a nested mount's root) is computed.
type stateCache struct {
	g    *globPattern
	dirs map[string]globState
}

func (c *stateCache) of(rel string) globState {
	if st, ok := c.dirs[rel]; ok {
		return st
	}
	st := c.g.step(c.of(parentRel(rel)), path.Base(rel))
	c.dirs[rel] = st
	return st
}
