package pathmap

import (
	"reflect"
	"testing"
)

func TestMapEnv(t *testing.T) {
	f := newFixture(t)
	in := []string{
		"LANG=C.UTF-8",
		"KENNEL_CODING_AGENT_DIR=" + f.a + "/d",
		"KENNEL_BASH_SHELL=/bin/bash",
		"PYTHONPATH=" + f.a + "/d:" + f.root + "/outside:" + f.c,
		"PATH=/usr/bin:/bin",
		"EMPTYLIST=" + f.a + "::" + f.b,
		"URL=http://example.com/x",
		"REL=some/relative/path",
		"MIXED=/x:rel",
		"NOEQUALS",
		"EMPTY=",
		"ROOT=/",
		"HIDDEN=" + f.a + "/sub/hidden",
	}
	got, diags := f.m.MapEnv(in)
	want := []string{
		"LANG=C.UTF-8",
		"KENNEL_CODING_AGENT_DIR=/work/d",
		"PYTHONPATH=/work/d:/data",
		"EMPTYLIST=/work::/work/sub",
		"URL=http://example.com/x",
		"REL=some/relative/path",
		"MIXED=/x:rel",
		"NOEQUALS",
		"EMPTY=",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("MapEnv:\n%q\nwant:\n%q", got, want)
	}
	// One diagnostic per left-out host path (bash, outside, /usr/bin, /bin, /, hidden),
	// plus one for PATH, left with no element.
	if len(diags) != 7 {
		t.Fatalf("diagnostics %q", diags)
	}
}
