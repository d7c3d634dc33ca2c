package containerd

import (
	"errors"
	"fmt"
	"testing"

	runcoptions "github.com/containerd/containerd/api/types/runc/options"

	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/docker"
)

func TestAtLeast(t *testing.T) {
	for _, c := range []struct {
		have string
		want bool
	}{
		{"1.6.20~ds1", true}, {"1.6.0", true}, {"v1.7.1", true}, {"2.0.0", true},
		{"1.5.18", false}, {"1", false}, {"", false},
	} {
		if got := atLeast(c.have, MinVersion); got != c.want {
			t.Errorf("atLeast(%q, %q) = %v, want %v", c.have, MinVersion, got, c.want)
		}
	}
}

// TestClassifyNotImplemented: a service the daemon lacks reads "containerd too old" and
// is ErrUnavailable.
func TestClassifyNotImplemented(t *testing.T) {
	err := classify(fmt.Errorf("transfer: %w", errdefs.ErrNotImplemented))
	if !errors.Is(err, transports.ErrUnavailable) || !errors.Is(err, errdefs.ErrNotImplemented) {
		t.Fatalf("classify: %v", err)
	}
	if want := "containerd too old: need " + MinVersion; len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
		t.Errorf("classify: %q, want it to start %q", err, want)
	}
}

// TestOwnerLabelsRoundTrip: the labels an object gets read back as its owner; a partial
// set is no owner.
func TestOwnerLabelsRoundTrip(t *testing.T) {
	c := docker.Controller{Host: "h", Boot: "b", PID: 42, Start: 7}
	l := ownerLabels(c, "s")
	got, ok := docker.ControllerOf(l, docker.LabelController)
	if !ok || got != c || l[LabelSession] != "s" {
		t.Fatalf("ControllerOf(ownerLabels(%+v)) = %+v, %v", c, got, ok)
	}
	delete(l, docker.LabelStart)
	if _, ok := docker.ControllerOf(l, docker.LabelController); ok {
		t.Error("a partial identity read as an owner")
	}
}

// TestOptionsRefused: options that cannot work are refused before anything runs.
func TestOptionsRefused(t *testing.T) {
	for _, o := range []Options{
		{User: "kennel"},
		{User: "1000"},
		{FIFODir: "relative"},
	} {
		if err := o.check(); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("check(%+v) = %v, want ErrInvalidArgument", o, err)
		}
	}
}

// TestShimOfRuntime: a shim name is the container's runtime as it is; anything else is an
// OCI runtime binary the runc shim runs (runsc: gVisor).
func TestShimOfRuntime(t *testing.T) {
	for rt, want := range map[string]string{"": "", DefaultRuntime: "", "io.containerd.runsc.v1": "", "runsc": "runsc", "/usr/local/bin/runsc": "/usr/local/bin/runsc"} {
		name, opts := Options{Runtime: rt}.shim()
		bin := ""
		if o, ok := opts.(*runcoptions.Options); ok {
			bin = o.BinaryName
		}
		switch {
		case want == "" && rt != "" && (name != rt || opts != nil):
			t.Errorf("%q: shim %q options %v, want the shim itself", rt, name, opts)
		case want != "" && (name != DefaultRuntime || bin != want):
			t.Errorf("%q: shim %q binary %q, want the runc shim running %q", rt, name, bin, want)
		}
	}
	if err := (Options{Runtime: "run sc"}).check(); err == nil {
		t.Error("a runtime with a space was accepted")
	}
}

// TestARuntimePathIsRefused: a runtime is a shim name or a bare binary name, never a
// path a description could point at a binary of its choosing with.
func TestARuntimePathIsRefused(t *testing.T) {
	for _, rt := range []string{"/usr/local/bin/runsc", "./runsc", "run sc", "runsc\x00"} {
		var fe *transports.FieldError
		if err := (Options{Runtime: rt}).check(); !errors.As(err, &fe) || fe.Field != "Options.Runtime" {
			t.Errorf("runtime %q: %v, want a FieldError on Options.Runtime", rt, err)
		}
	}
	for _, rt := range []string{"", "runsc", "io.containerd.runsc.v1", DefaultRuntime} {
		if err := (Options{Runtime: rt}).check(); err != nil {
			t.Errorf("runtime %q refused: %v", rt, err)
		}
	}
}
