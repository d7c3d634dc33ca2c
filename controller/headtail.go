package controller

import (
	"fmt"
	"sync"
)

// headTail keeps the first and the last n bytes written to it and counts the rest: a
// bounded record of a kernel's stderr for error reports. Safe for concurrent use.
type headTail struct {
	n    int
	mu   sync.Mutex
	head []byte
	tail []byte // the bytes past the head, at most 2n: the last n of them are kept
	seen int64
}

func newHeadTail(n int) *headTail { return &headTail{n: n} }

// Write keeps p's bytes within the bounds; it never fails.
func (h *headTail) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen += int64(len(p))
	k := min(h.n-len(h.head), len(p))
	h.head = append(h.head, p[:k]...)
	q := p[k:]
	h.tail = append(h.tail, q[max(0, len(q)-h.n):]...)
	if len(h.tail) > 2*h.n {
		h.tail = h.tail[:copy(h.tail, h.tail[len(h.tail)-h.n:])]
	}
	return len(p), nil
}

// String returns the head, a count of what was dropped, and the tail.
func (h *headTail) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	tail := h.tail[max(0, len(h.tail)-h.n):]
	if dropped := h.seen - int64(len(h.head)) - int64(len(tail)); dropped > 0 {
		return fmt.Sprintf("%s\n[… %d bytes of stderr dropped …]\n%s", h.head, dropped, tail)
	}
	return string(h.head) + string(tail)
}

// suffix formats the kept stderr for an error message: "" when there is none.
func (h *headTail) suffix() string {
	s := h.String()
	if s == "" {
		return ""
	}
	return "; kernel stderr:\n" + s
}
