package controller

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestPropStdinWriterKeepsEveryFrameWholeAndInOrder: frames of any size sent to a pipe
// whose reader takes them in any chunks at any pace arrive whole and in the order sent,
// whether a send wrote on the caller's goroutine, in part, or only queued.
func TestPropStdinWriterKeepsEveryFrameWholeAndInOrder(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		r, w, err := os.Pipe()
		if err != nil {
			rt.Fatal(err)
		}
		defer r.Close()
		sw := newStdinWriter(w, func(error) {})
		var want bytes.Buffer
		n := rapid.IntRange(1, 30).Draw(rt, "frames")
		var frames [][]byte
		for i := range n {
			size := rapid.SampledFrom([]int{1, 100, 4 << 10, 64 << 10, 300 << 10}).Draw(rt, "size")
			f := bytes.Repeat([]byte{byte('a' + i%26)}, size)
			frames = append(frames, f)
			want.Write(f)
		}
		chunk := rapid.IntRange(1<<10, 200<<10).Draw(rt, "chunk")
		slow := rapid.Bool().Draw(rt, "slow reader")
		got := make(chan []byte, 1)
		go func() {
			var b bytes.Buffer
			buf := make([]byte, chunk)
			for b.Len() < want.Len() {
				m, err := r.Read(buf)
				b.Write(buf[:m])
				if err != nil {
					break
				}
				if slow {
					time.Sleep(20 * time.Microsecond)
				}
			}
			got <- b.Bytes()
		}()
		for _, f := range frames {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := sw.send(ctx, append([]byte(nil), f...))
			cancel()
			if err != nil {
				rt.Fatal(err)
			}
		}
		select {
		case b := <-got:
			if !bytes.Equal(b, want.Bytes()) {
				rt.Fatalf("got %d bytes, want %d; equal prefix %d", len(b), want.Len(), commonPrefix(b, want.Bytes()))
			}
		case <-time.After(20 * time.Second):
			rt.Fatal("the frames did not all arrive")
		}
		sw.stop(errors.New("done"))
		w.Close()
	})
}

func commonPrefix(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

// TestStdinWriterNeverBlocksASenderOnAKernelThatDoesNotRead: with nobody reading, sends
// return at once until the queue is full; then a send waits only until its context ends
// (ErrStdinStalled), and stop releases the writer.
func TestStdinWriterNeverBlocksASenderOnAKernelThatDoesNotRead(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	sw := newStdinWriter(w, func(error) {})
	big := make([]byte, 16<<20)
	start := time.Now()
	for i := range maxQueuedStdin / len(big) {
		if err := sw.send(context.Background(), append([]byte(nil), big...)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("queueing took %v", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := sw.send(ctx, append([]byte(nil), big...)); !errors.Is(err, ErrStdinStalled) {
		t.Fatalf("a send past a full queue: %v, want ErrStdinStalled", err)
	}
	sw.stop(errors.New("killed"))
	if err := sw.send(context.Background(), []byte("x\n")); err == nil || err.Error() != "killed" {
		t.Fatalf("a send after stop: %v", err)
	}
}
