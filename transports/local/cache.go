package local

import (
	"context"
	"fmt"
	"sync"
)

// cache computes a value once per key and keeps it; a failed computation is not kept, so
// the next caller tries again. Callers waiting for another's computation give up when
// their own ctx ends.
type cache[T any] struct {
	mu sync.Mutex
	m  map[string]*cacheEntry[T]
}

type cacheEntry[T any] struct {
	done chan struct{}
	val  T
	err  error
}

func (c *cache[T]) get(ctx context.Context, key string, compute func(context.Context) (T, error)) (T, error) {
	c.mu.Lock()
	e, ok := c.m[key]
	if !ok {
		if c.m == nil {
			c.m = make(map[string]*cacheEntry[T])
		}
		e = &cacheEntry[T]{done: make(chan struct{})}
		c.m[key] = e
	}
	c.mu.Unlock()
	if !ok {
		e.err = fmt.Errorf("compute %q: panicked", key) // replaced unless compute panics
		defer func() {
			if e.err != nil {
				c.mu.Lock()
				delete(c.m, key)
				c.mu.Unlock()
			}
			close(e.done)
		}()
		e.val, e.err = compute(ctx)
		return e.val, e.err
	}
	select {
	case <-e.done:
		return e.val, e.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("wait for %q: %w", key, context.Cause(ctx))
	}
}
