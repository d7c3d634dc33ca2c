package workspaces

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestPlanTable walks the hand-back table row by row on small, readable trees.
func TestPlanTable(t *testing.T) {
	cases := []struct {
		name                string
		base, parent, child []string
		want                []string // "path action[:reason]"
	}{
		{
			name:   "child did not change: parent's content",
			base:   []string{"file a 1"},
			parent: []string{"file a 2"},
			child:  []string{"file a 1"},
		},
		{
			name:   "only the child changed: taken",
			base:   []string{"file a 1", "file b 1"},
			parent: []string{"file a 1", "file b 1"},
			child:  []string{"file a 2", "file:0755 b 1", "file n new"},
			want:   []string{"a take", "b take", "n take"},
		},
		{
			name:   "only the child removed: removed",
			base:   []string{"file a 1", "symlink l x"},
			parent: []string{"file a 1", "symlink l x"},
			child:  nil,
			want:   []string{"a remove", "l remove"},
		},
		{
			name:   "both changed the same way: kept",
			base:   []string{"file a 1", "file b 1"},
			parent: []string{"file a 2"},
			child:  []string{"file a 2"},
			want:   []string{"a same", "b same"},
		},
		{
			name:   "both changed differently: conflict",
			base:   []string{"file a 1", "file b 1", "file c 1"},
			parent: []string{"file a 2", "file:0755 c 1"},
			child:  []string{"file a 3", "file b 3"},
			want:   []string{"a conflict:both-changed", "b conflict:both-changed", "c conflict:both-changed"},
		},
		{
			name:   "a directory where the child puts a file",
			base:   nil,
			parent: []string{"file d/x 1"},
			child:  []string{"file d 2"},
			want:   []string{"d conflict:directory-in-parent"},
		},
		{
			name:   "a directory the hand-back empties is replaced",
			base:   []string{"file d/x 1", "file d/y/z 1"},
			parent: []string{"file d/x 1", "file d/y/z 1"},
			child:  []string{"file d 2"},
			want:   []string{"d take", "d/x remove", "d/y/z remove"},
		},
		{
			name:   "an empty directory where the child puts a file",
			base:   nil,
			parent: []string{"dir d"},
			child:  []string{"symlink d x"},
			want:   []string{"d take"},
		},
		{
			name:   "a file where the child's directory goes",
			base:   nil,
			parent: []string{"file a 1", "symlink s a"},
			child:  []string{"file a/x 2", "file s/y 2"},
			want:   []string{"a/x conflict:file-in-parent-path", "s/y conflict:file-in-parent-path"},
		},
		{
			name:   "the child turns a file into a directory",
			base:   []string{"file a 1"},
			parent: []string{"file a 1"},
			child:  []string{"file a/x 2"},
			want:   []string{"a remove", "a/x take"},
		},
		{
			name:   "the parent changed the file the child turned into a directory",
			base:   []string{"file a 1"},
			parent: []string{"file a 9"},
			child:  []string{"file a/x 2"},
			want:   []string{"a conflict:both-changed", "a/x conflict:file-in-parent-path"},
		},
		{
			name:   "the child removed a file the parent made a directory",
			base:   []string{"file a 1"},
			parent: []string{"file a/x 1"},
			child:  nil,
			want:   []string{"a conflict:both-changed"},
		},
		{
			name:   "a special file is not taken",
			base:   nil,
			parent: nil,
			child:  []string{"fifo p"},
			want:   []string{"p conflict:unsupported-kind"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base, parent, child := tree(t, tc.base...), tree(t, tc.parent...), tree(t, tc.child...)
			m := Plan(base, parent, child)
			var got []string
			for _, d := range m.Decisions {
				s := d.Path + " " + d.Action.String()
				if d.Reason != "" {
					s += ":" + string(d.Reason)
				}
				got = append(got, s)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("decisions:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			checkPlan(t, base, parent, child)
			checkCut(t, base, parent, child)
		})
	}
}

// TestPlanProperties states the hand-back laws over generated base, parent and child trees:
// unchanged paths keep the parent's content, child-only changes are taken, conflicts are
// reported exactly when both changed differently or the parent cannot hold the path, no
// version is lost, and a plan rerun on its own (whole or cut) result changes nothing more.
func TestPlanProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		base := genTree(t, "base")
		parent := genMutation(t, base, "parent")
		child := genMutation(t, base, "child")
		checkPlan(t, base, parent, child)
		checkCut(t, base, parent, child)
	})
}

// TestPlanDoesNotTouchItsInputs checks Plan is pure: its listings are left as they were.
func TestPlanDoesNotTouchItsInputs(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		base := genTree(t, "base")
		parent := genMutation(t, base, "parent")
		child := genMutation(t, base, "child")
		before := fmt.Sprint(base, parent, child)
		a := Plan(base, parent, child)
		b := Plan(base, parent, child)
		if fmt.Sprint(base, parent, child) != before {
			t.Fatalf("Plan changed its inputs")
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("two Plans of the same input differ")
		}
	})
}
