package pathmap

import (
	"context"
	"io/fs"
	"reflect"
	"slices"
	"testing"
)

func TestWalkSeesSandboxLayout(t *testing.T) {
	f := newFixture(t)
	tg, err := f.m.Resolve("/work", ".")
	must(t, err)
	var got []string
	var rd Reader
	defer rd.Close()
	err = f.m.Walk(context.Background(), tg, nil, func(e Entry) error {
		got = append(got, e.Rel+" "+e.Sandbox)
		if e.Type.IsRegular() {
			a, _, err := e.ReadFile(nil, 1<<20)
			if err != nil {
				t.Errorf("ReadFile(%s): %v", e.Sandbox, err)
			}
			b, _, err := rd.ReadFile(e, nil, 1<<20)
			if err != nil || string(a) != string(b) {
				t.Errorf("Reader.ReadFile(%s) = %q, %v; Entry.ReadFile %q", e.Sandbox, b, err, a)
			}
		} else if _, _, err := rd.ReadFile(e, nil, 1<<20); err == nil {
			t.Errorf("Reader.ReadFile(%s) read a %v", e.Sandbox, e.Type)
		}
		return nil
	})
	must(t, err)
	want := []string{
		"d /work/d", "d/f /work/d/f",
		"labs /work/labs", "lc /work/lc", "lin /work/lin", "lsub /work/lsub",
		// a/sub is covered by the /work/sub mount: its host content is not listed.
		"ünï cødé /work/ünï cødé", oddName + " /work/" + oddName,
		"nohost/deep/z /work/nohost/deep/z",
		"sub/g /work/sub/g",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("walk:\n%q\nwant:\n%q", got, want)
	}
	// A file yields itself; fs.SkipAll stops.
	tg, _ = f.m.Resolve("/work", "lin")
	n := 0
	must(t, f.m.Walk(context.Background(), tg, nil, func(e Entry) error {
		n++
		if e.Sandbox != "/work/d/f" || e.Rel != "f" {
			t.Errorf("file walk gave %+v", e)
		}
		return fs.SkipAll
	}))
	if n != 1 {
		t.Fatalf("file walk gave %d entries", n)
	}
	// Entries that are not regular files are refused by Open.
	tg, _ = f.m.Resolve("/work", ".")
	must(t, f.m.Walk(context.Background(), tg, nil, func(e Entry) error {
		if e.Type&fs.ModeSymlink != 0 {
			if _, err := e.Open(); reason(t, err) == "" {
				t.Errorf("Open(%s) opened a symlink", e.Sandbox)
			}
		}
		return nil
	}))
}

func TestReadFileBounded(t *testing.T) {
	f := newFixture(t)
	tg, _ := f.m.Resolve("/work", "d")
	must(t, f.m.Walk(context.Background(), tg, nil, func(e Entry) error {
		data, more, err := e.ReadFile(make([]byte, 0, 2), 3)
		if err != nil || string(data) != "hel" || !more {
			t.Errorf("ReadFile max 3 = %q, %v, %v", data, more, err)
		}
		data, more, err = e.ReadFile(nil, 5)
		if err != nil || string(data) != "hello" || more {
			t.Errorf("ReadFile max 5 = %q, %v, %v", data, more, err)
		}
		return nil
	}))
}

func TestWalkCancel(t *testing.T) {
	f := newFixture(t)
	tg, _ := f.m.Resolve("/work", ".")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.m.Walk(ctx, tg, nil, func(Entry) error { return nil }); err != context.Canceled {
		t.Fatalf("Walk with a cancelled context: %v", err)
	}
}
