package link

import "slices"

// Bounds of the two outboxes (docs/protocol.md, "Outboxes").
const (
	// KernelMaxFrames and KernelMaxBytes bound the kernel's outbox; past them it drops.
	KernelMaxFrames = 4096
	KernelMaxBytes  = 64 << 20
	// ControllerMaxFrames and ControllerMaxBytes bound the controller's outbox; past them
	// a sender waits.
	ControllerMaxFrames = 2048
	ControllerMaxBytes  = 64 << 20
)

// Entry is one frame waiting in an outbox for its acknowledgement.
type Entry struct {
	Seq   uint64
	Frame []byte
	// Key is the coalescing key ("" for a frame that must be delivered).
	Key string
}

// Outbox holds the frames one side sent, or will send, until the other side acknowledges
// them. Seqs are assigned from 1 without gaps. It is not safe for concurrent use.
type Outbox struct {
	maxFrames int
	maxBytes  int64
	entries   []Entry // ascending seq
	bytes     int64
	next      uint64
	dropped   uint64
}

// NewOutbox returns an empty outbox of the given bounds (both at least 1).
func NewOutbox(maxFrames int, maxBytes int64) *Outbox {
	return &Outbox{maxFrames: max(maxFrames, 1), maxBytes: max(maxBytes, 1), next: 1}
}

// Room reports whether a frame of size bytes fits now without dropping anything.
func (o *Outbox) Room(size int) bool {
	return len(o.entries) < o.maxFrames && o.bytes+int64(size) <= o.maxBytes
}

// Push gives frame (not copied; the caller must not change it) the next seq and keeps it.
// A frame with a key replaces the waiting frame of the same key, if any (superseded, not
// dropped). When the frame does not fit, the oldest coalescing frames go first, then the
// oldest frames, until it does; each counts in Dropped. A frame larger than the byte bound
// is itself dropped (counted) and its seq is never sent.
func (o *Outbox) Push(frame []byte, key string) uint64 {
	seq := o.next
	o.next++
	if key != "" {
		for i, e := range o.entries {
			if e.Key == key {
				o.remove(i)
				break
			}
		}
	}
	size := int64(len(frame))
	if size > o.maxBytes {
		o.dropped++
		return seq
	}
	for i := 0; i < len(o.entries) && !o.Room(len(frame)); {
		if o.entries[i].Key != "" {
			o.remove(i)
			o.dropped++
			continue
		}
		i++
	}
	for !o.Room(len(frame)) {
		o.remove(0)
		o.dropped++
	}
	o.entries = append(o.entries, Entry{Seq: seq, Frame: frame, Key: key})
	o.bytes += size
	return seq
}

func (o *Outbox) remove(i int) {
	o.bytes -= int64(len(o.entries[i].Frame))
	o.entries = slices.Delete(o.entries, i, i+1)
}

// Ack drops every frame with seq at or below n: the other side applied them.
func (o *Outbox) Ack(n uint64) {
	i := 0
	for i < len(o.entries) && o.entries[i].Seq <= n {
		o.bytes -= int64(len(o.entries[i].Frame))
		i++
	}
	o.entries = slices.Delete(o.entries, 0, i)
}

// After returns the waiting frames with seq above seq, in order. The slice is a copy; the
// frames are shared.
func (o *Outbox) After(seq uint64) []Entry {
	i := 0
	for i < len(o.entries) && o.entries[i].Seq <= seq {
		i++
	}
	return append([]Entry(nil), o.entries[i:]...)
}

// Resume makes the next seq follow ack when the other side has applied more than this
// outbox ever numbered: a new controller continues after what an earlier one sent.
func (o *Outbox) Resume(ack uint64) {
	if ack >= o.next {
		o.next = ack + 1
	}
}

// Next is the seq the next Push gets.
func (o *Outbox) Next() uint64 { return o.next }

// Len and Bytes are how many frames, and how many bytes of them, wait.
func (o *Outbox) Len() int { return len(o.entries) }

// Bytes is the size of the waiting frames.
func (o *Outbox) Bytes() int64 { return o.bytes }

// TakeDropped returns how many frames were dropped since the last call, and resets it.
func (o *Outbox) TakeDropped() uint64 {
	n := o.dropped
	o.dropped = 0
	return n
}

// Inbox is one side's receiving state: the last seq applied. The zero value has applied
// nothing.
type Inbox struct{ last uint64 }

// Accept reports whether the frame of seq is to be applied (it is past the last one
// applied, which it then becomes) or is a replay to drop.
func (in *Inbox) Accept(seq uint64) bool {
	if seq <= in.last {
		return false
	}
	in.last = seq
	return true
}

// Last is the highest seq applied: the cumulative ack to send.
func (in *Inbox) Last() uint64 { return in.last }
