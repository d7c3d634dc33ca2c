package gate

import (
	"context"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/kennel-dev/kennel/protocol"
)

// frameOf returns a reader of one line of exactly size bytes (newline included): head,
// 'x' fill, tail, generated as read.
func frameOf(head, tail string, size int) io.Reader {
	return &genReader{head: []byte(head), n: size - len(head) - len(tail), tail: []byte(tail)}
}

// TestRealLimits32MiB runs the protocol's own limits on real 32 MiB lines: a request of
// exactly MaxLine bytes runs, one byte more is refused too_large, an oversized stream is
// dropped, the session goes on, and an oversized line without a head is a fault.
func TestRealLimits32MiB(t *testing.T) {
	if testing.Short() {
		t.Skip("reads about 170 MiB; run without -short")
	}
	reqHead := func(id string) string {
		return `{"event":"host_request","id":"` + id + `","type":"fs.write","cell":"c1","args":{"data":"`
	}
	after := req("after", "fs.read")
	in := io.MultiReader(
		frameOf(reqHead("at"), "\"}}\n", protocol.MaxLine),
		frameOf(reqHead("over"), "\"}}\n", protocol.MaxLine+1),
		frameOf(`{"event":"stream","id":"c1","name":"stdout","text":"`, "\"}\n", protocol.MaxLine+1),
		frameOf(`{"event":"display","id":"c1","data":{"text/plain":"`, "\"}}\n", protocol.MaxLine),
		strings.NewReader(after),
		frameOf("", "\n", 40<<20),
	)
	rec, err := runGate(t, defaultLimits(), serves, in)
	if !isFault(err) {
		t.Fatalf("err = %v, want a fault for the headerless line", err)
	}
	want := []Outcome{
		{Kind: "run", ID: "at", Type: "fs.write", Len: protocol.MaxLine - 1},
		refused("over", protocol.CodeTooLarge),
		{Kind: "diag"},
		{Kind: "event", Event: "display", ID: "c1", Len: protocol.MaxLine - 1},
		run("after", "fs.read", after),
		{Kind: "fault"},
	}
	if !reflect.DeepEqual(rec.outs, want) {
		t.Fatalf("%v, want %v", rec.outs, want)
	}
}

// TestOversizedMemoryIsBoundedAtRealLimits: what the gate allocates for an oversized
// line is about its buffer at the limit, the same for a line of 64 MiB or of 192 MiB.
func TestOversizedMemoryIsBoundedAtRealLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 256 MiB; run without -short")
	}
	var got []uint64
	for _, size := range []int{2 * protocol.MaxLine, 6 * protocol.MaxLine} {
		got = append(got, allocated(func() {
			g := New(Config{Serves: serves, OnRequest: func(Request) {}, OnRefusal: func(Refusal) {}})
			in := frameOf(`{"event":"host_request","id":"big","type":"fs.write","args":{"data":"`, "\"}}\n", size)
			if err := g.Run(context.Background(), in); err != nil {
				t.Error(err)
			}
		}))
	}
	const bound = 2*protocol.MaxLine + 16<<20
	for _, n := range got {
		if n > bound {
			t.Fatalf("allocated %v bytes, want at most %d", got, bound)
		}
	}
	if d := int64(got[1]) - int64(got[0]); d > 4<<20 || d < -4<<20 {
		t.Fatalf("allocations %v grow with the line's length", got)
	}
}

// TestTheBufferShrinksAfterLongLines: lines longer than the retained buffer, then many
// reads of short lines (the buffer shrinks back under them), then a long line again: all
// decided as written.
func TestTheBufferShrinksAfterLongLines(t *testing.T) {
	long := func(id string) io.Reader {
		return frameOf(`{"event":"stream","id":"`+id+`","name":"stdout","text":"`, "\"}\n", 2*retainBuf)
	}
	var small strings.Builder
	for range 4 * shrinkAfter {
		small.WriteString(`{"event":"log","id":"","level":"info","message":"tick"}` + "\n")
	}
	in := io.MultiReader(long("a"), long("b"), &chunkReader{data: []byte(small.String()), sizes: []int{60}}, long("c"))
	rec, err := runGate(t, defaultLimits(), serves, in)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rec.outs); n != 3+4*shrinkAfter || rec.outs[0].ID != "a" || rec.outs[1].ID != "b" || rec.outs[n-1].ID != "c" {
		t.Fatalf("%d outcomes, first %v, last %v", n, rec.outs[0], rec.outs[n-1])
	}
	for _, o := range rec.outs {
		if o.Kind != "event" {
			t.Fatalf("outcome %v", o)
		}
	}
}
