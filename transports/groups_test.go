package transports_test

import (
	"context"
	"io"
	"testing"

	"github.com/kennel-dev/kennel/transports"
)

// fakeKernel is a Kernel that reports info and does nothing else.
type fakeKernel struct{ info transports.Info }

func (fakeKernel) Stdin() io.WriteCloser          { return nil }
func (fakeKernel) Stdout() io.Reader              { return nil }
func (k fakeKernel) Info() transports.Info        { return k.info }
func (fakeKernel) Kill(context.Context) error     { return nil }
func (fakeKernel) Wait() (transports.Exit, error) { return transports.Exit{}, nil }

// groupsKernel is a fakeKernel that also claims HostGroups.
type groupsKernel struct{ fakeKernel }

func (groupsKernel) VerifyGroup(pid, pgid int) error   { return nil }
func (groupsKernel) GroupAlive(pgid int) (bool, error) { return true, nil }
func (groupsKernel) KillGroup(pgid int) error          { return nil }

// TestGroupsOfNeedsHostPIDsAndTheMethods: a kernel's groups are the caller's to signal
// only when the kernel implements HostGroups and its pids are host pids.
func TestGroupsOfNeedsHostPIDsAndTheMethods(t *testing.T) {
	host := transports.Info{Transport: "local", PID: 42, HostPIDs: true}
	for _, tc := range []struct {
		name string
		k    transports.Kernel
		want bool
	}{
		{"host pids and groups", groupsKernel{fakeKernel{host}}, true},
		{"groups without host pids", groupsKernel{fakeKernel{transports.Info{Transport: "docker"}}}, false},
		{"host pids without groups", fakeKernel{host}, false},
	} {
		if got := transports.GroupsOf(tc.k) != nil; got != tc.want {
			t.Errorf("%s: GroupsOf gives groups %v, want %v", tc.name, got, tc.want)
		}
	}
}
