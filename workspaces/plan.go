package workspaces

import (
	"maps"
	"slices"
	"sort"
	"strings"
)

// Action says what a hand-back does with one path the child changed.
type Action uint8

// The actions of a Decision.
const (
	// ActionTake puts the child's entry (a file or symlink) in place of the parent's: the
	// parent had not changed the path since the child's copy was made.
	ActionTake Action = iota + 1
	// ActionRemove removes the parent's entry: the child removed it and the parent had not
	// changed it.
	ActionRemove
	// ActionSame does nothing: the parent already holds what the child holds (both changed
	// the path the same way, or an earlier, cut hand-back already took it).
	ActionSame
	// ActionConflict keeps the parent's entry; the child's version (when it has one) is
	// saved under the workspace's conflicts/ directory.
	ActionConflict
)

// String returns the action's lowercase name.
func (a Action) String() string {
	switch a {
	case ActionTake:
		return "take"
	case ActionRemove:
		return "remove"
	case ActionSame:
		return "same"
	case ActionConflict:
		return "conflict"
	}
	return "unknown"
}

// Reason says why a path is a conflict.
type Reason string

// The reasons of a conflict.
const (
	// ReasonBothChanged: the parent and the child changed the path to different contents
	// (a removal counts as a content).
	ReasonBothChanged Reason = "both-changed"
	// ReasonDirectoryThere: the child has a file or symlink where the parent has a
	// directory that holds entries the hand-back may not remove.
	ReasonDirectoryThere Reason = "directory-in-parent"
	// ReasonFileInPath: the parent has a file or symlink where one of the directories of
	// the child's path goes.
	ReasonFileInPath Reason = "file-in-parent-path"
	// ReasonUnsupported: the child made a special file (FIFO, socket, device), which a
	// hand-back never copies.
	ReasonUnsupported Reason = "unsupported-kind"
)

// Decision is the plan for one path the child changed.
type Decision struct {
	// Path is the slash-separated path relative to the workspace root.
	Path string
	// Action is what the hand-back does at Path.
	Action Action
	// Reason is set for ActionConflict only.
	Reason Reason
	// Child is the child's entry at Path; nil when the child removed the path.
	Child *Entry
}

// Merge is the outcome of Plan: one decision per path the child changed, and the count of
// the paths it did not change.
type Merge struct {
	// Decisions is sorted by Path. Paths the child did not change have no decision: the
	// parent's content stays.
	Decisions []Decision
	// Unchanged counts the files and symlinks of the base that the child did not change.
	Unchanged int
}

// Plan decides, path by path, how a child's changes come back into its parent. base is the
// workspace as the child found it, parent and child are the two trees now. It is the one
// place the three-way rule lives; it reads nothing but its arguments.
//
// For each file or symlink path the child changed (changed: the entries differ by Kind,
// Mode or Content; a removal is a change):
//
//   - the parent still holds the base's entry: ActionTake (ActionRemove for a removal);
//   - the parent holds the child's entry: ActionSame;
//   - otherwise: ActionConflict, ReasonBothChanged.
//
// A path the parent cannot hold as a file is a conflict whatever the contents: a directory
// at the path (ReasonDirectoryThere), unless every file below it is one the parent kept
// from the base and the child removed, so that the hand-back empties it; or, after the
// decisions on shorter paths, a file or symlink where one of the path's directories goes
// (ReasonFileInPath). Directories are never taken themselves: they are made to hold taken
// files and removed when a hand-back empties them.
//
// Applied to its own result (the parent after the hand-back, or after any part of it done
// in the order Apply uses), Plan returns only ActionSame and the same conflicts: this is
// what lets a cut hand-back rerun from the start.
func Plan(base, parent, child Listing) Merge {
	var m Merge
	var paths []string
	for p, b := range base {
		if b.Kind == KindDir {
			continue
		}
		if same(&b, fileAt(child, p)) {
			m.Unchanged++
			continue
		}
		paths = append(paths, p)
	}
	for p, c := range child {
		if c.Kind == KindDir {
			continue
		}
		if fileAt(base, p) != nil {
			continue // decided in the loop above
		}
		paths = append(paths, p)
	}
	sort.Strings(paths)

	pl := planner{base: base, parent: parent, child: child, final: map[string]*Entry{}}
	m.Decisions = make([]Decision, 0, len(paths))
	for _, p := range paths {
		m.Decisions = append(m.Decisions, pl.decide(p))
	}
	return m
}

// planner holds the state of one Plan call.
type planner struct {
	base, parent, child Listing
	// final holds the parent's planned entry at paths decided ActionTake (the child's
	// entry) or ActionRemove (nil).
	final map[string]*Entry
	// parentKeys is the sorted key set of parent, made on first use.
	parentKeys []string
}

// fileAt returns l's entry at p when it is not a directory, or nil.
func fileAt(l Listing, p string) *Entry {
	e := l.get(p)
	if e == nil || e.Kind == KindDir {
		return nil
	}
	return e
}

func (pl *planner) decide(p string) Decision {
	b, c := fileAt(pl.base, p), fileAt(pl.child, p)
	d := Decision{Path: p, Child: c}
	conflict := func(r Reason) Decision {
		d.Action, d.Reason = ActionConflict, r
		return d
	}
	if c != nil && c.Kind == KindOther {
		return conflict(ReasonUnsupported)
	}
	par := pl.parent.get(p)
	if par != nil && par.Kind == KindDir {
		switch {
		case pl.clearable(p):
			par = nil // emptied by the removals decided below it
		case c != nil:
			return conflict(ReasonDirectoryThere)
		case pl.child.get(p) != nil:
			// The base had a file here; both removed it and made a directory.
			d.Action = ActionSame
			return d
		default:
			// The base had a file here; the parent made it a directory with files of its
			// own and the child removed it.
			return conflict(ReasonBothChanged)
		}
	}
	switch {
	case same(par, b):
		if c == nil {
			d.Action = ActionRemove
		} else {
			d.Action = ActionTake
		}
	case same(par, c):
		d.Action = ActionSame
		return d
	default:
		return conflict(ReasonBothChanged)
	}
	if d.Action == ActionTake {
		for _, a := range ancestors(p) {
			if f := pl.finalAt(a); f != nil && f.Kind != KindDir {
				return conflict(ReasonFileInPath)
			}
		}
	}
	pl.final[p] = c
	return d
}

// finalAt returns the parent's entry at a once the decisions made so far are carried out.
func (pl *planner) finalAt(a string) *Entry {
	if f, ok := pl.final[a]; ok {
		return f
	}
	return pl.parent.get(a)
}

// clearable reports whether the hand-back empties the parent's directory dir: every file
// below it is the base's, unchanged by the parent and removed by the child.
func (pl *planner) clearable(dir string) bool {
	if pl.parentKeys == nil {
		pl.parentKeys = slices.Sorted(maps.Keys(pl.parent))
	}
	prefix := dir + "/"
	i, _ := slices.BinarySearch(pl.parentKeys, prefix)
	for ; i < len(pl.parentKeys) && strings.HasPrefix(pl.parentKeys[i], prefix); i++ {
		q := pl.parentKeys[i]
		e := pl.parent[q]
		if e.Kind == KindDir {
			continue
		}
		if !same(&e, fileAt(pl.base, q)) || fileAt(pl.child, q) != nil {
			return false
		}
	}
	return true
}
