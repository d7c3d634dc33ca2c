package fsroot_test

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/fshost/fsroot"
	"github.com/kennel-dev/kennel/pathmap"
	"github.com/kennel-dev/kennel/protocol"
)

// Every class has a protocol code, and an Error of it matches the class, the errdefs
// class it belongs to and its cause with errors.Is; the path map's sentinels are the same
// values.
func TestClassesAreProtocolCodesAndErrdefsClasses(t *testing.T) {
	kinds := map[error]func(error) bool{
		fsroot.ErrOutside: errdefs.IsPermissionDenied, fsroot.ErrReadOnly: errdefs.IsPermissionDenied,
		fsroot.ErrNotFound: errdefs.IsNotFound, fsroot.ErrLoop: errdefs.IsInvalidArgument,
		fsroot.ErrInvalid: errdefs.IsInvalidArgument, fsroot.ErrExists: errdefs.IsAlreadyExists,
		fsroot.ErrCrossDevice: errdefs.IsFailedPrecondition, fsroot.ErrChanged: errdefs.IsAborted,
		fsroot.ErrDenied: errdefs.IsPermissionDenied, fsroot.ErrNoSpace: errdefs.IsResourceExhausted,
		fsroot.ErrInternal: errdefs.IsInternal, fsroot.ErrUnserved: errdefs.IsNotImplemented,
		fsroot.ErrBinary: errdefs.IsFailedPrecondition, fsroot.ErrNoMatch: errdefs.IsFailedPrecondition,
		fsroot.ErrAmbiguous: errdefs.IsFailedPrecondition, fsroot.ErrTooLarge: errdefs.IsOutOfRange,
	}
	if len(kinds) != len(fsroot.Classes()) {
		t.Fatalf("%d classes, %d checked", len(fsroot.Classes()), len(kinds))
	}
	for _, c := range fsroot.Classes() {
		err := fsroot.NewError("op", "/work/x", c, syscall.ENOSPC)
		code := protocol.Code(err.Code())
		switch {
		case !code.Valid():
			t.Errorf("%v: code %q is not a protocol code", c, code)
		case !errors.Is(err, c) || !errors.Is(err, syscall.ENOSPC):
			t.Errorf("%v: errors.Is misses the class or the cause", c)
		case !kinds[c](err):
			t.Errorf("%v: not its errdefs class", c)
		case (err.Version == fsroot.Version) != (code == protocol.CodeOutside || code == protocol.CodeReadOnly):
			t.Errorf("%v: version %q", c, err.Version)
		}
		if reason, version := err.Refusal(); reason != string(code) || version != err.Version {
			t.Errorf("%v: Refusal() = %q, %q", c, reason, version)
		}
	}
	for _, p := range [][2]error{
		{pathmap.ErrOutside, fsroot.ErrOutside}, {pathmap.ErrNotFound, fsroot.ErrNotFound},
		{pathmap.ErrInvalid, fsroot.ErrInvalid}, {pathmap.ErrNoSpace, fsroot.ErrNoSpace},
		{pathmap.ErrDenied, fsroot.ErrDenied}, {pathmap.ErrReadOnly, fsroot.ErrReadOnly},
	} {
		if p[0] != p[1] {
			t.Errorf("pathmap's %v is not fsroot's", p[0])
		}
	}
}

// An Error says op, the quoted (and cut) sandbox path, the cause and the class.
func TestErrorMessage(t *testing.T) {
	err := fsroot.NewError("write", "/work/a\nb", fsroot.ErrNoSpace, syscall.ENOSPC)
	if got, want := err.Error(), `write "/work/a\nb": no space left on device: disk full or quota exceeded`; got != want {
		t.Errorf("Error() = %q; want %q", got, want)
	}
	long := fsroot.NewError("map", "/"+strings.Repeat("x", 5000), fsroot.ErrOutside, nil).Error()
	if len(long) > 600 || !strings.HasSuffix(long, `...": outside every mount`) {
		t.Errorf("a long path is not cut: %d bytes", len(long))
	}
}

// CheckPath refuses what no Root may look at, with the class every Root uses.
func TestCheckPath(t *testing.T) {
	for p, want := range map[string]error{
		"": fsroot.ErrInvalid, "a\x00b": fsroot.ErrInvalid, strings.Repeat("a", fsroot.MaxPath+1): fsroot.ErrInvalid,
		"~": fsroot.ErrOutside, "~/x": fsroot.ErrOutside, "~root/x": fsroot.ErrOutside,
		"a/~": nil, "/work/x": nil, "x": nil,
	} {
		err := fsroot.CheckPath("map", p)
		if (want == nil) != (err == nil) || (want != nil && !errors.Is(err, want)) {
			t.Errorf("CheckPath(%.20q) = %v; want %v", p, err, want)
		}
	}
}
