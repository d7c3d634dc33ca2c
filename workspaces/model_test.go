package workspaces

import (
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"pgregory.net/rapid"

	"github.com/kennel-dev/kennel/internal/testtree"
)

// tb is what the model helpers need of a *testing.T or a *rapid.T.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

// tree builds a Listing from testtree specs ("file a/b content", "file:0755 x 1",
// "symlink l target", "dir d", "fifo p"), the same specs testtree.Build makes on disk.
// Directories above every entry are added.
func tree(t tb, specs ...string) Listing {
	t.Helper()
	l := Listing{}
	for _, s := range specs {
		e, err := testtree.Parse(s)
		if err != nil {
			t.Fatalf("%v", err)
		}
		switch e.Kind {
		case testtree.File:
			l[e.Path] = Entry{Kind: KindFile, Mode: e.Mode, Content: e.Content}
		case testtree.Symlink:
			l[e.Path] = Entry{Kind: KindSymlink, Content: e.Content}
		case testtree.Dir:
			l[e.Path] = Entry{Kind: KindDir}
		case testtree.FIFO:
			l[e.Path] = Entry{Kind: KindOther}
		default:
			t.Fatalf("spec %q: a Listing holds no %s", s, e.Kind)
		}
	}
	addDirs(l)
	return l
}

// addDirs adds a directory entry above every entry of l.
func addDirs(l Listing) {
	for p := range maps.Clone(l) {
		for _, a := range ancestors(p) {
			l[a] = Entry{Kind: KindDir}
		}
	}
}

// valid reports the first way l is not a tree.
func valid(l Listing) error {
	for p := range l {
		for _, a := range ancestors(p) {
			e, ok := l[a]
			if !ok {
				return fmt.Errorf("%s: no directory %s above it", p, a)
			}
			if e.Kind != KindDir {
				return fmt.Errorf("%s: below the %s %s", p, e.Kind, a)
			}
		}
	}
	return nil
}

// files returns l without its directories.
func files(l Listing) Listing {
	out := Listing{}
	for p, e := range l {
		if e.Kind != KindDir {
			out[p] = e
		}
	}
	return out
}

// dirsOf returns the set of directories of l (listed or implied).
func dirsOf(l Listing) map[string]bool {
	out := map[string]bool{}
	for p, e := range l {
		if e.Kind == KindDir {
			out[p] = true
		}
		for _, a := range ancestors(p) {
			out[a] = true
		}
	}
	return out
}

// applyOrder returns the decisions that change the parent in the order Apply carries them
// out: removals deepest first, then takes in path order. Same-removals are included, as
// Apply tidies emptied directories above them too.
func applyOrder(m Merge) []Decision {
	var rm, take []Decision
	for _, d := range m.Decisions {
		switch {
		case d.Action == ActionRemove || (d.Action == ActionSame && d.Child == nil):
			rm = append(rm, d)
		case d.Action == ActionTake:
			take = append(take, d)
		}
	}
	slices.Reverse(rm)
	return append(rm, take...)
}

// modelApply carries out the first n operations of applyOrder(m) on a copy of parent, the
// way the disk hand-back does, and returns the result. n < 0 means all.
func modelApply(t tb, parent, child Listing, m Merge, n int) Listing {
	t.Helper()
	out := maps.Clone(parent)
	childDirs := dirsOf(child)
	for _, d := range m.Decisions {
		if d.Action == ActionConflict {
			childDirs[d.Path] = true // tidying keeps what a conflict keeps
		}
	}
	ops := applyOrder(m)
	if n < 0 || n > len(ops) {
		n = len(ops)
	}
	for _, d := range ops[:n] {
		switch d.Action {
		case ActionRemove, ActionSame:
			if e, ok := out[d.Path]; ok && e.Kind != KindDir {
				delete(out, d.Path)
			}
			as := append(ancestors(d.Path), d.Path)
			for i := len(as) - 1; i >= 0; i-- {
				a := as[i]
				if e, ok := out[a]; !ok || e.Kind != KindDir {
					continue
				}
				if childDirs[a] || hasBelow(out, a) {
					break
				}
				delete(out, a)
			}
		case ActionTake:
			for _, a := range ancestors(d.Path) {
				if e, ok := out[a]; ok && e.Kind != KindDir {
					t.Fatalf("take %s: a %s at %s", d.Path, e.Kind, a)
				}
				out[a] = Entry{Kind: KindDir}
			}
			if e, ok := out[d.Path]; ok && e.Kind == KindDir {
				for q, e := range out {
					if under(q, d.Path) {
						if e.Kind != KindDir {
							t.Fatalf("take %s: a directory with files is there", d.Path)
						}
						delete(out, q)
					}
				}
			}
			out[d.Path] = *d.Child
		}
	}
	if err := valid(out); err != nil {
		t.Fatalf("result is not a tree: %v", err)
	}
	return out
}

func hasBelow(l Listing, dir string) bool {
	for p := range l {
		if under(p, dir) {
			return true
		}
	}
	return false
}

// outcomeOf summarises a Merge as the hand-back record does.
func outcomeOf(m Merge) (taken, removed []string, conflicts []string) {
	for _, d := range m.Decisions {
		switch {
		case d.Action == ActionConflict:
			conflicts = append(conflicts, d.Path+":"+string(d.Reason))
		case d.Child == nil:
			removed = append(removed, d.Path)
		default:
			taken = append(taken, d.Path)
		}
	}
	return
}

// genTree draws a small tree: names from a, b, c up to three deep; files, symlinks,
// executable files, empty directories.
func genTree(t *rapid.T, label string) Listing {
	n := rapid.IntRange(0, 8).Draw(t, label+"-n")
	l := Listing{}
	for i := range n {
		p := genPath(t, fmt.Sprintf("%s-%d", label, i))
		put(l, p, genEntry(t, fmt.Sprintf("%s-%d", label, i)))
	}
	return l
}

func genPath(t *rapid.T, label string) string {
	parts := rapid.SliceOfN(rapid.SampledFrom([]string{"a", "b", "c"}), 1, 3).Draw(t, label+"-path")
	return strings.Join(parts, "/")
}

func genEntry(t *rapid.T, label string) Entry {
	switch rapid.IntRange(0, 9).Draw(t, label+"-kind") {
	case 0, 1:
		return Entry{Kind: KindSymlink, Content: rapid.SampledFrom([]string{"t1", "t2", "../a"}).Draw(t, label+"-target")}
	case 2:
		return Entry{Kind: KindDir}
	default:
		mode := rapid.SampledFrom([]fs.FileMode{0o644, 0o644, 0o755}).Draw(t, label+"-mode")
		return Entry{Kind: KindFile, Mode: mode, Content: rapid.SampledFrom([]string{"1", "2", "3", ""}).Draw(t, label+"-content")}
	}
}

// put sets p to e in l, making the tree valid: a non-directory above p becomes a
// directory, and whatever was below p goes when e is not a directory.
func put(l Listing, p string, e Entry) {
	for _, a := range ancestors(p) {
		if x, ok := l[a]; ok && x.Kind != KindDir {
			delete(l, a)
		}
		l[a] = Entry{Kind: KindDir}
	}
	if e.Kind != KindDir {
		for q := range l {
			if under(q, p) {
				delete(l, q)
			}
		}
	}
	l[p] = e
}

// genMutation draws a tree changed from base: kept, edited, chmodded, removed, retyped and
// added paths.
func genMutation(t *rapid.T, base Listing, label string) Listing {
	l := maps.Clone(base)
	for _, p := range slices.Sorted(maps.Keys(base)) {
		e, ok := l[p]
		if !ok || e.Kind == KindDir {
			continue
		}
		switch rapid.IntRange(0, 7).Draw(t, label+"-"+p) {
		case 0:
			delete(l, p)
		case 1:
			e.Content += "x"
			l[p] = e
		case 2:
			if e.Kind == KindFile {
				e.Mode ^= 0o111
				l[p] = e
			}
		case 3:
			put(l, p, genEntry(t, label+"-re-"+p))
		}
	}
	for i := range rapid.IntRange(0, 4).Draw(t, label+"-adds") {
		put(l, genPath(t, fmt.Sprintf("%s-add%d", label, i)), genEntry(t, fmt.Sprintf("%s-add%d", label, i)))
	}
	return l
}

// checkPlan states the laws of Plan on one (base, parent, child) triple and returns the
// parent after the hand-back.
func checkPlan(t tb, base, parent, child Listing) Listing {
	t.Helper()
	m := Plan(base, parent, child)
	if !slices.IsSortedFunc(m.Decisions, func(a, b Decision) int { return strings.Compare(a.Path, b.Path) }) {
		t.Fatalf("decisions not sorted")
	}
	result := modelApply(t, parent, child, m, -1)
	decided := map[string]Decision{}
	for _, d := range m.Decisions {
		decided[d.Path] = d
	}
	unchanged := 0
	for p, b := range files(base) {
		if same(&b, fileAt(child, p)) {
			unchanged++
		}
	}
	if unchanged != m.Unchanged {
		t.Fatalf("Unchanged = %d, want %d", m.Unchanged, unchanged)
	}
	// Every path of the three trees, files only.
	all := map[string]bool{}
	for _, l := range []Listing{base, parent, child, result} {
		for p := range files(l) {
			all[p] = true
		}
	}
	for p := range all {
		b, par, c, r := fileAt(base, p), fileAt(parent, p), fileAt(child, p), fileAt(result, p)
		d, isDecided := decided[p]
		childChanged := !same(b, c)
		if childChanged != isDecided {
			t.Fatalf("%s: child changed %v but decided %v", p, childChanged, isDecided)
		}
		if !childChanged {
			// cow_keeps_parent: the parent's entry stays.
			if !same(r, par) {
				t.Fatalf("%s: child did not change it, but the parent's %v became %v", p, par, r)
			}
			continue
		}
		if d.Action == ActionConflict {
			// cow_conflict_reported: parent's entry kept; the child's version is carried.
			if !same(result.get(p), parent.get(p)) {
				t.Fatalf("%s: conflict but the parent's %v became %v", p, parent.get(p), result.get(p))
			}
			if !same(d.Child, c) {
				t.Fatalf("%s: conflict carries %v, child has %v", p, d.Child, c)
			}
			// cow_conflict_is_real.
			switch d.Reason {
			case ReasonBothChanged:
				if raw := parent.get(p); same(raw, b) || same(raw, c) {
					t.Fatalf("%s: both-changed conflict, but parent %v base %v child %v", p, parent.get(p), b, c)
				}
			case ReasonDirectoryThere:
				if e := parent.get(p); e == nil || e.Kind != KindDir || c == nil {
					t.Fatalf("%s: directory conflict without a directory", p)
				}
			case ReasonFileInPath:
				blocked := false
				for _, a := range ancestors(p) {
					if e := result.get(a); e != nil && e.Kind != KindDir {
						blocked = true
					}
				}
				if !blocked || c == nil {
					t.Fatalf("%s: file-in-path conflict, but nothing blocks it", p)
				}
			case ReasonUnsupported:
				if c == nil || c.Kind != KindOther {
					t.Fatalf("%s: unsupported conflict for %v", p, c)
				}
			default:
				t.Fatalf("%s: conflict without a reason", p)
			}
			continue
		}
		// cow_takes_child: the child's content is the parent's now.
		if !same(r, c) {
			t.Fatalf("%s: decided %v, but the result %v is not the child's %v", p, d.Action, r, c)
		}
		if d.Action == ActionSame && !same(par, c) {
			t.Fatalf("%s: same, but parent %v child %v", p, par, c)
		}
		// No byte of the parent lost: what it held was the base's.
		if d.Action != ActionSame && !same(par, b) {
			t.Fatalf("%s: %v over a parent entry %v the base did not have (%v)", p, d.Action, par, b)
		}
	}
	// No parent byte lost anywhere: every parent file is in the result or was the base's
	// (and the child changed it).
	for p, e := range files(parent) {
		if r := fileAt(result, p); !same(r, &e) && (!same(&e, fileAt(base, p)) || same(fileAt(base, p), fileAt(child, p))) {
			t.Fatalf("%s: the parent's %v is lost", p, e)
		}
	}
	// Idempotence: replanning on the result takes nothing and reports the same.
	again := Plan(base, result, child)
	for _, d := range again.Decisions {
		if d.Action == ActionTake || d.Action == ActionRemove {
			t.Fatalf("replan on the result: %s %s", d.Action, d.Path)
		}
	}
	t1, r1, c1 := outcomeOf(m)
	t2, r2, c2 := outcomeOf(again)
	if !slices.Equal(t1, t2) || !slices.Equal(r1, r2) || !slices.Equal(c1, c2) {
		t.Fatalf("replan outcome differs:\n%v %v %v\n%v %v %v", t1, r1, c1, t2, r2, c2)
	}
	return result
}

// checkCut states that a hand-back cut after any number of its operations reruns to the
// same result and outcome.
func checkCut(t tb, base, parent, child Listing) {
	t.Helper()
	m := Plan(base, parent, child)
	full := modelApply(t, parent, child, m, -1)
	wantT, wantR, wantC := outcomeOf(m)
	for n := range len(applyOrder(m)) {
		cut := modelApply(t, parent, child, m, n)
		m2 := Plan(base, cut, child)
		got := modelApply(t, cut, child, m2, -1)
		if !maps.Equal(got, full) {
			t.Fatalf("cut after %d operations: result %v, uncut %v", n, got, full)
		}
		gt, gr, gc := outcomeOf(m2)
		if !slices.Equal(gt, wantT) || !slices.Equal(gr, wantR) || !slices.Equal(gc, wantC) {
			t.Fatalf("cut after %d operations: outcome %v %v %v, uncut %v %v %v", n, gt, gr, gc, wantT, wantR, wantC)
		}
	}
}

// under reports whether p lies strictly below dir.
func under(p, dir string) bool {
	return len(p) > len(dir) && p[len(dir)] == '/' && strings.HasPrefix(p, dir)
}
