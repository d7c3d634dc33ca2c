package jobs

import (
	"context"
	"sync"
)

// fakeOwner counts kills and fails them when err is set.
type fakeOwner struct {
	mu    sync.Mutex
	kills int
	err   error
}

func (o *fakeOwner) Kill(context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.kills++
	return o.err
}

func (o *fakeOwner) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.kills
}

type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func newTable(t fataler, opts TableOptions) *Table {
	t.Helper()
	tb, err := NewTable(opts)
	if err != nil {
		t.Fatalf("NewTable: %v", err)
	}
	return tb
}

func startJob(t fataler, tb *Table, spec Spec) *Job {
	t.Helper()
	if spec.Owner == nil {
		spec.Owner = &fakeOwner{}
	}
	j, err := tb.Start(spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return j
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
