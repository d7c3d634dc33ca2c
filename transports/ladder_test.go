package transports

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestLadderStopsClimbingAtTheEnd: the rungs run in order, each once, and none runs after
// the end is confirmed; Kill returns at the end, for every caller.
func TestLadderStopsClimbingAtTheEnd(t *testing.T) {
	for endAfter := 0; endAfter <= 3; endAfter++ {
		ended := make(chan struct{})
		var mu sync.Mutex
		var ran []int
		step := func(i int) Step {
			return Step{Act: func() {
				mu.Lock()
				ran = append(ran, i)
				mu.Unlock()
				if i == endAfter {
					close(ended)
				}
			}, Grace: 20 * time.Millisecond}
		}
		l := &Ladder{Ended: ended, Steps: []Step{step(1), step(2), step(3)}}
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				defer cancel()
				err := l.Kill(ctx, "test kernel")
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
	}
}

// TestLadderWithZeroGracesRunsEveryRung: rungs without a grace follow one another at once.
func TestLadderWithZeroGracesRunsEveryRung(t *testing.T) {
	ended := make(chan struct{})
	n := 0
	l := &Ladder{Ended: ended, Steps: []Step{{Act: func() { n++ }}, {Act: func() { n++ }}, {Act: func() { n++; close(ended) }}}}
	if err := l.Kill(context.Background(), "k"); err != nil || n != 3 {
		t.Fatalf("Kill = %v after %d rungs", err, n)
	}
}
