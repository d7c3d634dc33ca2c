package transports

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestWatchStopsClimbingAtTheEnd: the rungs run in order, each once, and none runs after
// the end is seen; Kill returns at the end, for every caller, and the end is Killed.
func TestWatchStopsClimbingAtTheEnd(t *testing.T) {
	for endAfter := 0; endAfter <= 3; endAfter++ {
		end := make(chan struct{})
		var mu sync.Mutex
		var ran []int
		step := func(i int) Step {
			return Step{Act: func() {
				mu.Lock()
				ran = append(ran, i)
				mu.Unlock()
				if i == endAfter {
					close(end)
				}
			}, Grace: 20 * time.Millisecond}
		}
		w := NewWatch(WatchSpec{What: "test kernel", Steps: []Step{step(1), step(2), step(3)},
			Reap: func(func() bool) (Exit, error) { <-end; return Exit{Code: 7}, nil }})
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				defer cancel()
				err := w.Kill(ctx)
				if endAfter == 0 && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("no end: Kill = %v, want the context's cause", err)
				}
				if endAfter > 0 && err != nil {
					t.Errorf("ended after rung %d: Kill = %v", endAfter, err)
				}
			}()
		}
		wg.Wait()
		mu.Lock()
		want := endAfter
		if endAfter == 0 {
			want = 3 // no end: every rung runs, once
		}
		if len(ran) != want {
			t.Errorf("ended after rung %d: rungs run %v", endAfter, ran)
		}
		for i, r := range ran {
			if r != i+1 {
				t.Errorf("rungs out of order: %v", ran)
			}
		}
		mu.Unlock()
		if endAfter == 0 {
			close(end)
		}
		if e, err := w.Wait(); e != (Exit{Code: 7, Killed: true}) || err != nil {
			t.Errorf("Wait = %+v, %v", e, err)
		}
	}
}

// TestWatchWithZeroGracesRunsEveryRung: rungs without a grace follow one another at once.
func TestWatchWithZeroGracesRunsEveryRung(t *testing.T) {
	end := make(chan struct{})
	n := 0
	w := NewWatch(WatchSpec{Steps: []Step{{Act: func() { n++ }}, {Act: func() { n++ }}, {Act: func() { n++; close(end) }}},
		Reap: func(func() bool) (Exit, error) { <-end; return Exit{}, nil }})
	if err := w.Kill(context.Background()); err != nil || n != 3 {
		t.Fatalf("Kill = %v after %d rungs", err, n)
	}
}

// An end seen before Kill is not Killed, however often Kill is called after; Kill then
// climbs nothing and waits for the release; Wait reports the release's error.
func TestWatchEndBeforeKill(t *testing.T) {
	seenNow, release := make(chan struct{}), make(chan struct{})
	boom := errors.New("released badly")
	acted := false
	w := NewWatch(WatchSpec{
		Steps: []Step{{Act: func() { acted = true }}},
		Reap: func(seen func() bool) (Exit, error) {
			<-seenNow
			if seen() {
				t.Error("seen reports a Kill that came after")
			}
			return Exit{Code: 3, Killed: true}, nil // Killed is the Watch's to say
		},
		Release: func(e Exit, err error) error {
			<-release
			if e.Killed || err != nil {
				t.Errorf("release got %+v, %v", e, err)
			}
			return boom
		},
	})
	close(seenNow)
	<-w.Ended()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := w.Kill(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Kill before the release: %v", err)
	}
	close(release)
	if err := w.Kill(context.Background()); err != nil {
		t.Errorf("Kill after the release: %v", err)
	}
	if e, err := w.Wait(); e != (Exit{Code: 3}) || !errors.Is(err, boom) || acted {
		t.Errorf("Wait = %+v, %v; a rung acted: %v", e, err, acted)
	}
}
