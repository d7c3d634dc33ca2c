package jobs

import (
	"errors"
	"strings"
	"testing"
)

func TestParseID(t *testing.T) {
	for _, ok := range []string{"j1", "j9", "j10", "j18446744073709551615"} {
		id, err := ParseID(ok)
		if err != nil || id.String() != ok {
			t.Errorf("ParseID(%q) = %v, %v", ok, id, err)
		}
	}
	for _, bad := range []string{"", "j", "j0", "j01", "J1", "j-1", "j+1", "j1x", "x1", "j 1", "j18446744073709551616", "j١"} {
		if _, err := ParseID(bad); !errors.Is(err, ErrInvalidID) {
			t.Errorf("ParseID(%q) = %v, want ErrInvalidID", bad, err)
		}
	}
	a, _ := ParseID("j9")
	b, _ := ParseID("j10")
	if !(a < b) {
		t.Fatal("j9 does not order before j10")
	}
	if _, err := ParseID("j" + strings.Repeat("\xdd", 1<<20)); err == nil || len(err.Error()) > 1024 {
		t.Fatalf("a 1 MiB id gives an error of %d bytes", len(err.Error()))
	}
	var id ID
	if err := id.UnmarshalText([]byte("j42")); err != nil || id != 42 {
		t.Fatalf("UnmarshalText = %v, %v", id, err)
	}
}

func FuzzParseID(f *testing.F) {
	for _, s := range []string{"j1", "j0", "j01", "j99999999999999999999", "jé", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseID(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidID) || len(err.Error()) > 1024 { // quoting is bounded whatever the input
				t.Fatalf("error %v", err)
			}
			return
		}
		if id == 0 || id.String() != s {
			t.Fatalf("ParseID(%q) = %d, which prints %q", s, id, id.String())
		}
	})
}
