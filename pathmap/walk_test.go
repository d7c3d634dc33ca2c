package pathmap

import (
	"context"
	"io"
	"io/fs"
	"reflect"
	"slices"
	"testing"

	"github.com/kennel-dev/kennel/fshost/fsroot"
)

func TestWalkSeesSandboxLayout(t *testing.T) {
	f := newFixture(t)
	tg, err := f.m.Resolve("/work", ".")
	must(t, err)
	var got []string
	ctx := context.Background()
	err = f.m.walkTarget(ctx, tg, nil, func(e fsroot.Entry) error {
		got = append(got, e.Rel+" "+e.Path)
		if e.Type.IsRegular() {
			a, _, err := f.m.ReadFile(ctx, e, nil, 1<<20)
			if err != nil {
				t.Errorf("ReadFile(%s): %v", e.Path, err)
			}
			rc, _, err := f.m.Open(ctx, "", e.Path)
			if err != nil {
				t.Fatalf("Open(%s): %v", e.Path, err)
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || string(a) != string(b) {
				t.Errorf("Open(%s) read %q, %v; ReadFile %q", e.Path, b, err, a)
			}
		} else if _, _, err := f.m.ReadFile(ctx, e, nil, 1<<20); err == nil {
			t.Errorf("ReadFile(%s) read a %v", e.Path, e.Type)
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
	must(t, f.m.walkTarget(ctx, tg, nil, func(e fsroot.Entry) error {
		n++
		if e.Path != "/work/d/f" || e.Rel != "f" {
			t.Errorf("file walk gave %+v", e)
		}
		return fs.SkipAll
	}))
	if n != 1 {
		t.Fatalf("file walk gave %d entries", n)
	}
	// Entries that are not regular files are refused by ReadFile.
	tg, _ = f.m.Resolve("/work", ".")
	must(t, f.m.walkTarget(ctx, tg, nil, func(e fsroot.Entry) error {
		if e.Type&fs.ModeSymlink != 0 {
			if _, _, err := f.m.ReadFile(ctx, e, nil, 100); reason(t, err) == "" {
				t.Errorf("ReadFile(%s) opened a symlink", e.Path)
			}
		}
		return nil
	}))
}

func TestReadFileBounded(t *testing.T) {
	f := newFixture(t)
	tg, _ := f.m.Resolve("/work", "d")
	ctx := context.Background()
	must(t, f.m.walkTarget(ctx, tg, nil, func(e fsroot.Entry) error {
		data, more, err := f.m.ReadFile(ctx, e, make([]byte, 0, 2), 3)
		if err != nil || string(data) != "hel" || !more {
			t.Errorf("ReadFile max 3 = %q, %v, %v", data, more, err)
		}
		data, more, err = f.m.ReadFile(ctx, e, nil, 5)
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
	if err := f.m.walkTarget(ctx, tg, nil, func(fsroot.Entry) error { return nil }); err != context.Canceled {
		t.Fatalf("Walk with a cancelled context: %v", err)
	}
}
