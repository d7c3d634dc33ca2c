package workspaces

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// scenario is one hand-back on disk: a parent made from base, then changed to parent while
// the child's copy is changed to child.
type scenario struct {
	base, parent, child     Listing
	touchParent, touchChild map[string]bool
	// clonedBase makes every base file a copy (no digests: CreateOptions.DigestMax -1).
	clonedBase bool
}

// genScenario draws a scenario from the same generators as the Plan tests.
func genScenario(t *rapid.T) scenario {
	base := genTree(t, "base")
	sc := scenario{
		base:        base,
		parent:      genMutation(t, base, "parent"),
		child:       genMutation(t, base, "child"),
		touchParent: map[string]bool{},
		clonedBase:  rapid.Bool().Draw(t, "clonedBase"),
		touchChild:  map[string]bool{},
	}
	for _, p := range slices.Sorted(maps.Keys(base)) {
		sc.touchParent[p] = rapid.Bool().Draw(t, "touch-parent-"+p)
		sc.touchChild[p] = rapid.Bool().Draw(t, "touch-child-"+p)
	}
	return sc
}

// staged is a scenario set up on disk, ready for its hand-back.
type staged struct {
	ws                    *CreateResult
	parentDir             string
	copied, parent, child Listing // what the copy held, and the two trees at the hand-back
	baseDir               Listing // what base/ held (the files not kept as digests)
}

// stage sets sc up under dir: writes the base, creates the workspace, checks the copy,
// changes both trees.
func stage(t tb, dir string, sc scenario) *staged {
	t.Helper()
	parentDir := filepath.Join(dir, "parent")
	if err := os.Mkdir(parentDir, 0o755); err != nil {
		t.Fatalf("%v", err)
	}
	writeTree(t, parentDir, sc.base)
	opts := CreateOptions{State: filepath.Join(dir, "state"), ID: "child", Logger: quiet()}
	if sc.clonedBase {
		opts.DigestMax = -1
	}
	ws, err := Create(context.Background(), parentDir, opts)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if sc.clonedBase && ws.Digested != 0 {
		t.Fatalf("%d digests without digests", ws.Digested)
	}
	copied := files(sc.base)
	addDirs(copied)
	if got := readTree(t, ws.Path()); !maps.Equal(got, copied) {
		t.Fatalf("the copy holds %v, want %v", got, copied)
	}
	if got := readBase(t, &ws.Workspace, private(copied)); !maps.Equal(got, private(copied)) {
		t.Fatalf("the base holds %v, want %v", got, private(copied))
	}
	baseDir := readTree(t, ws.Base())
	syncTree(t, parentDir, sc.base, sc.parent, sc.touchParent)
	syncTree(t, ws.Path(), copied, sc.child, sc.touchChild)
	return &staged{
		ws: ws, parentDir: parentDir, copied: copied, baseDir: baseDir,
		parent: readTree(t, parentDir), child: readTree(t, ws.Path()),
	}
}

// checkHandBack compares a finished hand-back with the model: the parent tree, the
// outcome, the saved conflicts and the child's directory become a link.
func checkHandBack(t tb, st *staged, out *Outcome) {
	t.Helper()
	m := Plan(st.copied, st.parent, st.child)
	want := modelApply(t, st.parent, st.child, m, -1)
	got := readTree(t, st.parentDir)
	if !maps.Equal(got, want) {
		t.Fatalf("parent after the hand-back:\n%v\nwant (model):\n%v\nbase %v\nparent %v\nchild %v", got, want, st.copied, st.parent, st.child)
	}
	taken, removed, conflicts := outcomeOf(m)
	if !slices.Equal(out.Taken, taken) || !slices.Equal(out.Removed, removed) || !slices.Equal(conflictsOf(out), conflicts) {
		t.Fatalf("outcome taken %v removed %v conflicts %v, want %v %v %v", out.Taken, out.Removed, conflictsOf(out), taken, removed, conflicts)
	}
	if out.Unchanged != m.Unchanged {
		t.Fatalf("outcome unchanged %d, want %d", out.Unchanged, m.Unchanged)
	}
	// No byte of the child's version lost: each conflict's version is saved.
	saved := Listing{}
	for _, c := range out.Conflicts {
		e := fileAt(st.child, c.Path)
		if e == nil || e.Kind == KindOther {
			if c.Saved != "" {
				t.Fatalf("%s: saved %q for a child that has nothing to save", c.Path, c.Saved)
			}
			continue
		}
		if want := filepath.Join(st.ws.Conflicts(), filepath.FromSlash(c.Path)); c.Saved != want {
			t.Fatalf("%s: saved at %q, want %q", c.Path, c.Saved, want)
		}
		saved[c.Path] = *e
	}
	if len(saved) > 0 {
		addDirs(saved)
		if got := readTree(t, st.ws.Conflicts()); !maps.Equal(got, saved) {
			t.Fatalf("conflicts/ holds %v, want %v", got, saved)
		}
	}
	if target, err := os.Readlink(st.ws.Path()); err != nil || target != st.ws.Parent {
		t.Fatalf("the child's directory is not a link to the parent: %q %v", target, err)
	}
	for _, gone := range []string{st.ws.Base(), filepath.Join(st.ws.Dir, manifestName), filepath.Join(st.ws.Dir, trashName)} {
		if _, err := os.Lstat(gone); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s is still there after the hand-back", gone)
		}
	}
}

// TestHandBackProperties runs Create, changes both trees, HandBack, on generated trees
// (files, removals, directories, symlinks, mode and type changes, rewrites of the same
// content), and checks the parent equals the model's: unchanged paths keep the parent's
// content, child-only changes are taken, conflicts exactly where Plan says, each with the
// child's version in conflicts/.
func TestHandBackProperties(t *testing.T) {
	root := t.TempDir()
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		dir := filepath.Join(root, fmt.Sprint(n))
		if err := os.Mkdir(dir, 0o755); err != nil {
			rt.Fatalf("%v", err)
		}
		st := stage(rt, dir, genScenario(rt))
		out, err := HandBack(context.Background(), st.ws.Path(), HandBackOptions{NoSync: true})
		if err != nil {
			rt.Fatalf("hand back: %v", err)
		}
		checkHandBack(rt, st, out)
	})
}

// TestHandBackTable runs the readable Plan cases on disk.
func TestHandBackTable(t *testing.T) {
	cases := []scenario{
		{
			base:   tree(t, "file a 1", "file b 1", "file c 1", "file d/x 1", "symlink l a", "file keep 1"),
			parent: tree(t, "file a 1", "file b 2", "file c 1", "file d/x 1", "symlink l a", "file keep 1", "file p parent"),
			child:  tree(t, "file a 9", "file b 3", "file d file", "symlink l b", "file keep 1", "file n/e/w new", "file:0755 c 1"),
		},
		{
			base:   tree(t, "file a 1"),
			parent: tree(t, "file a 1", "file q/x 1"),
			child:  tree(t, "file a/x 1", "file q 1"),
		},
	}
	for i, sc := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			st := stage(t, t.TempDir(), sc)
			out, err := HandBack(context.Background(), st.ws.Path(), HandBackOptions{})
			if err != nil {
				t.Fatal(err)
			}
			checkHandBack(t, st, out)
		})
	}
}

// errCut is the fault a test's Step hook injects.
var errCut = errors.New("cut")

// normalRecord reads a workspace's record with its own paths replaced, so records of two
// runs in different directories compare.
func normalRecord(t tb, st *staged) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(st.ws.Dir, recordName))
	if err != nil {
		t.Fatalf("read record: %v", err)
	}
	s := strings.ReplaceAll(string(data), st.ws.Dir, "<ws>")
	return strings.ReplaceAll(s, st.ws.Parent, "<parent>")
}

// TestHandBackCutAtEveryStep cuts a hand-back at each of its steps in turn (before and
// after each rename and removal, each save, before the record, and before each step that
// moves the base and the copy to trash/ and links the child's directory), checks the base
// and the copy are whole (in place or in trash/), reruns it, and checks the parent, the
// conflicts and the record equal those of an uncut run, every time; the child is stopped
// once per run and never after the record.
func TestHandBackCutAtEveryStep(t *testing.T) {
	scenarios := []scenario{{
		base:   tree(t, "file a 1", "file b 1", "file c 1", "file d/x 1", "file d/y 1", "symlink l a", "file keep 1", "file t 1"),
		parent: tree(t, "file a 1", "file b 2", "file c 1", "file d/x 1", "file d/y 1", "symlink l a", "file keep 1", "file p parent", "file t 1"),
		child:  tree(t, "file a 9", "file b 3", "file d file", "symlink l b", "file keep 1", "file n/e/w new", "file:0755 c 1", "file t/u 1"),
	}}
	for i := range 8 {
		scenarios = append(scenarios, rapid.Custom(genScenario).Example(i))
	}
	for i, sc := range scenarios {
		t.Run(fmt.Sprint(i), func(t *testing.T) { cutEverywhere(t, sc) })
	}
}

func cutEverywhere(t *testing.T, sc scenario) {
	ctx := context.Background()
	uncut := stage(t, t.TempDir(), sc)
	var steps []string
	stops := 0
	out, err := HandBack(ctx, uncut.ws.Path(), HandBackOptions{NoSync: true,
		Stop: func(context.Context) error { stops++; return nil },
		Step: func(name string) error { steps = append(steps, name); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	checkHandBack(t, uncut, out)
	if stops != 1 {
		t.Fatalf("stopped %d times", stops)
	}
	wantTree, wantRecord := readTree(t, uncut.parentDir), normalRecord(t, uncut)
	retireSteps := []string{"record", "trash base", "trash work", "link work"}
	if len(steps) < len(retireSteps) || !slices.Equal(steps[len(steps)-len(retireSteps):], retireSteps) {
		t.Fatalf("steps end %q, want %q", steps, retireSteps)
	}
	recordAt := len(steps) - len(retireSteps)
	for cut := range steps {
		st := stage(t, t.TempDir(), sc)
		stops := 0
		stop := func(context.Context) error { stops++; return nil }
		n := 0
		_, err := HandBack(ctx, st.ws.Path(), HandBackOptions{NoSync: true,
			Stop: stop,
			Step: func(string) error {
				n++
				if n == cut+1 {
					return errCut
				}
				return nil
			},
		})
		if !errors.Is(err, errCut) {
			t.Fatalf("cut at %q: error %v, want the cut", steps[cut], err)
		}
		// A cut hand-back leaves the copy where it was until the record; after it, the
		// base and the copy are whole, in place or in trash/.
		if cut <= recordAt {
			if _, err := os.Stat(st.ws.Path()); err != nil {
				t.Fatalf("cut at %q: the copy is gone: %v", steps[cut], err)
			}
		}
		trash := filepath.Join(st.ws.Dir, trashName)
		for _, c := range []struct {
			name string
			want Listing
		}{{baseName, st.baseDir}, {workName, st.child}} {
			where := filepath.Join(st.ws.Dir, c.name)
			if fi, err := os.Lstat(where); err != nil || !fi.IsDir() {
				where = filepath.Join(trash, c.name)
			}
			if got := readTree(t, where); !maps.Equal(got, c.want) {
				t.Fatalf("cut at %q: %s holds %v, want %v", steps[cut], where, got, c.want)
			}
		}
		out, err := HandBack(ctx, st.ws.Path(), HandBackOptions{NoSync: true, Stop: stop})
		if err != nil {
			t.Fatalf("rerun after a cut at %q: %v", steps[cut], err)
		}
		if got := readTree(t, st.parentDir); !maps.Equal(got, wantTree) {
			t.Fatalf("cut at %q: parent %v, uncut %v", steps[cut], got, wantTree)
		}
		if got := normalRecord(t, st); got != wantRecord {
			t.Fatalf("cut at %q: record\n%s\nuncut\n%s", steps[cut], got, wantRecord)
		}
		checkHandBack(t, &staged{ws: st.ws, parentDir: st.parentDir, copied: st.copied, parent: st.parent, child: st.child}, out)
		// Until the record exists every run stops the child; after it none does, and
		// the rerun returns the record.
		wantStops := 2
		if cut > recordAt {
			wantStops = 1
		}
		if stops != wantStops || out.Repeat != (cut > recordAt) {
			t.Fatalf("cut at %q: stopped %d times (want %d), repeat %v", steps[cut], stops, wantStops, out.Repeat)
		}
		// A repeat after the record: the recorded outcome, no stop.
		again, err := HandBack(ctx, st.ws.Dir, HandBackOptions{Stop: stop})
		if err != nil || !again.Repeat || stops != wantStops {
			t.Fatalf("repeat: %v repeat=%v stops=%d", err, again != nil && again.Repeat, stops)
		}
		if !slices.Equal(again.Taken, out.Taken) || !slices.Equal(conflictsOf(again), conflictsOf(out)) {
			t.Fatalf("repeat outcome %+v, first %+v", again, out)
		}
	}
}

// TestHandBackLeftCopyIsRemoved checks a copy beside a path that a crash left (the
// process died between the copy and its rename) is gone after the rerun.
func TestHandBackLeftCopyIsRemoved(t *testing.T) {
	sc := scenario{base: tree(t, "file d/a 1"), parent: tree(t, "file d/a 1"), child: tree(t, "file d/a 2")}
	st := stage(t, t.TempDir(), sc)
	_, err := HandBack(context.Background(), st.ws.Path(), HandBackOptions{Step: func(name string) error {
		if name == "rename d/a" {
			return errCut
		}
		return nil
	}})
	if !errors.Is(err, errCut) {
		t.Fatalf("error %v, want the cut", err)
	}
	left := filepath.Join(st.parentDir, "d", ".a"+besideSuffix)
	if _, err := os.Lstat(left); err != nil {
		t.Fatalf("no copy beside d/a after the cut: %v", err)
	}
	out, err := HandBack(context.Background(), st.ws.Path(), HandBackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(left); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the copy the cut left is still there: %v", err)
	}
	checkHandBack(t, st, out)
}

// TestHandBackFailedStopKeepsTheCopy checks a hand-back whose child cannot be stopped fails,
// changes nothing, and can be done later.
func TestHandBackFailedStopKeepsTheCopy(t *testing.T) {
	sc := scenario{base: tree(t, "file a 1"), parent: tree(t, "file a 1"), child: tree(t, "file a 2")}
	st := stage(t, t.TempDir(), sc)
	errStop := errors.New("kernel will not die")
	_, err := HandBack(context.Background(), st.ws.Path(), HandBackOptions{Stop: func(context.Context) error { return errStop }})
	if !errors.Is(err, errStop) {
		t.Fatalf("error %v, want the stop's", err)
	}
	if got := readTree(t, st.parentDir); !maps.Equal(got, st.parent) {
		t.Fatalf("a failed hand-back changed the parent: %v", got)
	}
	if got := readTree(t, st.ws.Path()); !maps.Equal(got, st.child) {
		t.Fatalf("a failed hand-back changed the copy: %v", got)
	}
	out, err := HandBack(context.Background(), st.ws.Path(), HandBackOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkHandBack(t, st, out)
}

// TestHandBackChildGitignoreHidesNoBaseFile checks a base file the child's .gitignore now
// ignores is not taken for removed, while a new file it ignores stays behind; a special
// file the child made is a conflict with nothing saved.
func TestHandBackChildGitignoreHidesNoBaseFile(t *testing.T) {
	sc := scenario{
		base:   tree(t, "file a.log 1", "file b 1"),
		parent: tree(t, "file a.log 1", "file b 1"),
		child:  tree(t, "file a.log 1", "file b 1", "file .gitignore *.log", "file new.log ignored", "file n new"),
	}
	st := stage(t, t.TempDir(), sc)
	if err := mkfifo(filepath.Join(st.ws.Path(), "pipe")); err != nil {
		t.Fatal(err)
	}
	out, err := HandBack(context.Background(), st.ws.Path(), HandBackOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	want := tree(t, "file a.log 1", "file b 1", "file .gitignore *.log", "file n new")
	if got := readTree(t, st.parentDir); !maps.Equal(got, want) {
		t.Fatalf("parent %v, want %v", got, want)
	}
	if got := conflictsOf(out); !slices.Equal(got, []string{"pipe:unsupported-kind"}) || out.Conflicts[0].Saved != "" {
		t.Fatalf("conflicts %+v", out.Conflicts)
	}
}

// private returns l with every file's mode 0600: the base keeps only bytes.
func private(l Listing) Listing {
	out := maps.Clone(l)
	for p, e := range out {
		if e.Kind == KindFile {
			e.Mode = 0o600
			out[p] = e
		}
	}
	return out
}

// TestHandBackParentChangedDuringTheHandBack checks a parent file changed after the scan,
// before its rename, is kept as a conflict and not overwritten.
func TestHandBackParentChangedDuringTheHandBack(t *testing.T) {
	sc := scenario{base: tree(t, "file x 1", "file y 1"), parent: tree(t, "file x 1", "file y 1"), child: tree(t, "file x 2")}
	st := stage(t, t.TempDir(), sc)
	out, err := HandBack(context.Background(), st.ws.Path(), HandBackOptions{NoSync: true, Step: func(name string) error {
		if name == "remove y" {
			return os.WriteFile(filepath.Join(st.parentDir, "x"), []byte("3"), 0o644)
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := readTree(t, st.parentDir); !maps.Equal(got, tree(t, "file x 3")) {
		t.Fatalf("parent %v", got)
	}
	if got := conflictsOf(out); !slices.Equal(got, []string{"x:both-changed"}) {
		t.Fatalf("conflicts %v", got)
	}
	if data, err := os.ReadFile(out.Conflicts[0].Saved); err != nil || string(data) != "2" {
		t.Fatalf("saved %q %v", data, err)
	}
}
