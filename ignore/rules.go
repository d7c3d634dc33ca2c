package ignore

// rules are the patterns in force inside one directory: its own .gitignore
// and, through parent, those of every directory above it up to the root.
type rules struct {
	parent *rules
	// depth is the number of components of the directory's path relative
	// to the root (0 for the root).
	depth int
	// patterns of this directory's .gitignore, in file order; nil if none.
	patterns []pattern
}

// ignored reports whether the entry rel (slash-separated, relative to the
// root; offs[i] is the byte offset of its component i, so len(offs) is its
// depth) is ignored by r, assuming its parent directories are not: the
// last pattern that matches, in the deepest .gitignore that has one,
// decides; a negated one re-includes.
func (r *rules) ignored(rel string, offs []int, isDir bool) bool {
	name := rel[offs[len(offs)-1]:]
	for ; r != nil; r = r.parent {
		sub := rel[offs[r.depth]:]
		for i := len(r.patterns) - 1; i >= 0; i-- {
			p := &r.patterns[i]
			if p.match(sub, name, isDir) {
				return !p.negate
			}
		}
	}
	return false
}
