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
	tail []byte // ring of the last n bytes, once head is full
	pos  int    // next write position in tail
	full bool   // tail has wrapped
	seen int64
}

func newHeadTail(n int) *headTail { return &headTail{n: n} }

// Write keeps p's bytes within the bounds; it never fails.
func (h *headTail) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen += int64(len(p))
	q := p
	if room := h.n - len(h.head); room > 0 {
		k := min(room, len(q))
		h.head = append(h.head, q[:k]...)
		q = q[k:]
	}
	if len(q) == 0 {
		return len(p), nil
	}
	if h.tail == nil {
		h.tail = make([]byte, h.n)
	}
	if len(q) >= h.n {
		copy(h.tail, q[len(q)-h.n:])
		h.pos, h.full = 0, true
		return len(p), nil
	}
	k := copy(h.tail[h.pos:], q)
	if k < len(q) {
		copy(h.tail, q[k:])
		h.full = true
	}
	h.pos = (h.pos + len(q)) % h.n
	if h.pos == 0 {
		h.full = true
	}
	return len(p), nil
}

// String returns the head, a count of what was dropped, and the tail.
func (h *headTail) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var tail []byte
	if h.full {
		tail = append(append(tail, h.tail[h.pos:]...), h.tail[:h.pos]...)
	} else if h.tail != nil {
		tail = h.tail[:h.pos]
	}
	dropped := h.seen - int64(len(h.head)) - int64(len(tail))
	if dropped > 0 {
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
