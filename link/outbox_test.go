package link

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// outboxModel is the outbox rule stated plainly: a list in seq order.
type outboxModel struct {
	maxFrames int
	maxBytes  int64
	entries   []Entry
	next      uint64
	dropped   uint64
}

func (m *outboxModel) size() (n int64) {
	for _, e := range m.entries {
		n += int64(len(e.Frame))
	}
	return n
}

func (m *outboxModel) fits(n int) bool {
	return len(m.entries) < m.maxFrames && m.size()+int64(n) <= m.maxBytes
}

func (m *outboxModel) push(frame []byte, key string) {
	seq := m.next
	m.next++
	if key != "" {
		for i, e := range m.entries {
			if e.Key == key {
				m.entries = append(m.entries[:i:i], m.entries[i+1:]...)
				break
			}
		}
	}
	if int64(len(frame)) > m.maxBytes {
		m.dropped++
		return
	}
	for !m.fits(len(frame)) {
		i := -1
		for j, e := range m.entries {
			if e.Key != "" {
				i = j
				break
			}
		}
		if i < 0 {
			i = 0
		}
		m.entries = append(m.entries[:i:i], m.entries[i+1:]...)
		m.dropped++
	}
	m.entries = append(m.entries, Entry{Seq: seq, Frame: frame, Key: key})
}

// TestPropOutboxFollowsTheRule: over generated pushes (with and without coalescing keys)
// and acks, the outbox holds exactly what the rule says: within its bounds, coalescing
// frames dropped before the others and the oldest first, one waiting frame per key,
// drops counted, seqs without gaps.
func TestPropOutboxFollowsTheRule(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		maxFrames := rapid.IntRange(1, 8).Draw(t, "maxFrames")
		maxBytes := int64(rapid.IntRange(1, 64).Draw(t, "maxBytes"))
		o := NewOutbox(maxFrames, maxBytes)
		m := &outboxModel{maxFrames: maxFrames, maxBytes: maxBytes, next: 1}
		var acked uint64
		for i, n := 0, rapid.IntRange(0, 60).Draw(t, "ops"); i < n; i++ {
			switch rapid.IntRange(0, 4).Draw(t, "op") {
			case 0:
				a := acked + uint64(rapid.IntRange(0, 3).Draw(t, "ackBy"))
				o.Ack(a)
				var keep []Entry
				for _, e := range m.entries {
					if e.Seq > a {
						keep = append(keep, e)
					}
				}
				m.entries, acked = keep, a
			default:
				frame := []byte(fmt.Sprintf("%0*d", rapid.IntRange(1, 24).Draw(t, "size"), i))
				key := rapid.SampledFrom([]string{"", "", "a", "b"}).Draw(t, "key")
				if seq := o.Push(frame, key); seq != m.next {
					t.Fatalf("push got seq %d, want %d", seq, m.next)
				}
				m.push(frame, key)
			}
			got := o.After(0)
			if len(got) != len(m.entries) {
				t.Fatalf("outbox %v, model %v", got, m.entries)
			}
			for j := range got {
				if got[j].Seq != m.entries[j].Seq || string(got[j].Frame) != string(m.entries[j].Frame) {
					t.Fatalf("outbox %v, model %v", got, m.entries)
				}
			}
			if o.Len() > maxFrames || o.Bytes() > maxBytes || o.Bytes() != m.size() {
				t.Fatalf("outbox holds %d frames, %d bytes; bounds %d, %d", o.Len(), o.Bytes(), maxFrames, maxBytes)
			}
		}
		if d := o.TakeDropped(); d != m.dropped {
			t.Fatalf("dropped %d, model %d", d, m.dropped)
		}
		if o.TakeDropped() != 0 {
			t.Fatal("TakeDropped does not reset")
		}
	})
}

func TestInboxAppliesEachSeqOnce(t *testing.T) {
	var in Inbox
	for _, tc := range []struct {
		seq  uint64
		want bool
	}{{1, true}, {1, false}, {3, true}, {2, false}, {3, false}, {4, true}} {
		if got := in.Accept(tc.seq); got != tc.want {
			t.Fatalf("Accept(%d) = %v, want %v", tc.seq, got, tc.want)
		}
	}
	if in.Last() != 4 {
		t.Fatalf("last %d", in.Last())
	}
}

func TestResumeContinuesAfterTheKernelsAck(t *testing.T) {
	o := NewOutbox(4, 100)
	o.Resume(41)
	if seq := o.Push([]byte("{}"), ""); seq != 42 {
		t.Fatalf("seq %d after resuming at 41, want 42", seq)
	}
	o.Resume(10)
	if o.Next() != 43 {
		t.Fatalf("an older ack moved next to %d", o.Next())
	}
}

func TestBackoffIsTheProtocols(t *testing.T) {
	b := Backoff{}.resolved()
	var want = []int{50, 100, 200, 400, 800, 1600, 2000, 2000}
	for i, ms := range want {
		if got := b.delay(i).Milliseconds(); got != int64(ms) {
			t.Fatalf("delay(%d) = %d ms, want %d", i, got, ms)
		}
	}
	if b.Tries != 40 {
		t.Fatalf("tries %d", b.Tries)
	}
}
